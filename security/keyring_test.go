package security

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestKeyringFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "keyring")
	var keys [][]byte
	for range 3 {
		s, err := NewKey()
		must(t, err)
		k, err := ParseKey(s)
		must(t, err)
		keys = append(keys, k)
	}
	must(t, SaveKeyringFile(p, keys))
	fi, err := os.Stat(p)
	must(t, err)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode().Perm())
	}
	got, err := LoadKeyringFile(p)
	must(t, err)
	if len(got) != 3 || string(got[0]) != string(keys[0]) || string(got[2]) != string(keys[2]) {
		t.Fatal("round trip changed the keys or their order")
	}
	for name, content := range map[string]string{
		"empty array": `[]`, "not json": `key`, "not base64": `["***"]`, "short key": `["AAAA"]`,
	} {
		f := filepath.Join(dir, "bad")
		must(t, os.WriteFile(f, []byte(content), 0o600))
		if _, err := LoadKeyringFile(f); !errors.Is(err, ErrKeyring) {
			t.Errorf("%s: %v, want ErrKeyring", name, err)
		}
	}
	fp := Fingerprint(keys[1])
	if k, err := MatchFingerprint(keys, fp[:8]); err != nil || string(k) != string(keys[1]) {
		t.Fatalf("match: %v", err)
	}
	if _, err := MatchFingerprint(keys, fp[:4]); !errors.Is(err, ErrKeyring) {
		t.Fatalf("short fingerprint: %v", err)
	}
	if _, err := MatchFingerprint(keys, "0000000000000000"); !errors.Is(err, ErrKeyring) && Fingerprint(keys[0]) != "0000000000000000" {
		t.Fatalf("unknown fingerprint: %v", err)
	}
}
