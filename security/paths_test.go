package security

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfinePath(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "datasets")
	must(t, os.MkdirAll(filepath.Join(root, "mnist"), 0o755))
	secret := filepath.Join(base, "secret")
	must(t, os.MkdirAll(secret, 0o755))
	must(t, os.Symlink(secret, filepath.Join(root, "escape")))                      // a link out of the root
	must(t, os.Symlink(filepath.Join(root, "mnist"), filepath.Join(root, "alias"))) // a link inside
	realRoot, _ := filepath.EvalSymlinks(root)
	for _, tc := range []struct {
		p    string
		want string // "" = refused
	}{
		{"mnist", filepath.Join(realRoot, "mnist")},
		{filepath.Join(root, "mnist"), filepath.Join(realRoot, "mnist")},
		{"alias", filepath.Join(realRoot, "mnist")},
		{"escape", ""},
		{filepath.Join(root, "escape"), ""},
		{"../secret", ""},
		{secret, ""},
		{"/etc", ""},
		{"missing", ""},
		{"", ""},
	} {
		got, err := ConfinePath([]string{root}, tc.p)
		if tc.want == "" {
			if !errors.Is(err, ErrOutsideRoots) {
				t.Errorf("%q: %q, %v; want ErrOutsideRoots", tc.p, got, err)
			}
			if err != nil && (strings.Contains(err.Error(), "no such") || strings.Contains(err.Error(), base) && !strings.Contains(tc.p, base)) {
				t.Errorf("%q: error %q reveals the file system", tc.p, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.p, got, err, tc.want)
		}
	}
	// The refusals of a missing path and of one outside read the same.
	_, e1 := ConfinePath([]string{root}, "/nonexistent/x")
	_, e2 := ConfinePath([]string{root}, "/etc")
	if strings.ReplaceAll(e1.Error(), "/nonexistent/x", "P") != strings.ReplaceAll(e2.Error(), "/etc", "P") {
		t.Errorf("distinguishable refusals: %q vs %q", e1, e2)
	}
}
