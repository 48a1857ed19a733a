package security

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrKeyring: a keyring file or key is malformed.
var ErrKeyring = errors.New("security: gossip keyring")

// A keyring file is Consul's format: a JSON array of base64 keys (16, 24
// or 32 bytes each), the primary first:
//
//	["pUqJrVyVRj5jsiYEkM/tFQYfWyJIv4s3XkvDwy7Cu5s=", "..."]

// LoadKeyringFile reads a keyring file; keys[0] is the primary.
func LoadKeyringFile(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w file: %w", ErrKeyring, err)
	}
	var enc []string
	if err := json.Unmarshal(b, &enc); err != nil {
		return nil, fmt.Errorf("%w file %q: want a JSON array of base64 keys: %v", ErrKeyring, path, err)
	}
	if len(enc) == 0 {
		return nil, fmt.Errorf("%w file %q: no key", ErrKeyring, path)
	}
	keys := make([][]byte, len(enc))
	for i, e := range enc {
		if keys[i], err = ParseKey(e); err != nil {
			return nil, fmt.Errorf("%w (file %q, key %d)", err, path, i)
		}
	}
	return keys, nil
}

// SaveKeyringFile writes keys (primary first) to path, mode 0600,
// atomically.
func SaveKeyringFile(path string, keys [][]byte) error {
	enc := make([]string, len(keys))
	for i, k := range keys {
		enc[i] = base64.StdEncoding.EncodeToString(k)
	}
	b, err := json.Marshal(enc)
	if err != nil {
		return err
	}
	return WriteFile(path, append(b, '\n'), true)
}

// NewKeyringFile writes a keyring of one new random 32-byte key (NewKey)
// to path, mode 0600, overwriting what is there: a cluster's first
// gossip keyring (a TLS node's --gossip-keyring-file).
func NewKeyringFile(path string) error {
	var k [32]byte
	if _, err := rand.Read(k[:]); err != nil {
		return err
	}
	return SaveKeyringFile(path, [][]byte{k[:]})
}

// ParseKey decodes one base64 gossip key and checks its length.
func ParseKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("%w: a key is not base64: %v", ErrKeyring, err)
	}
	switch len(k) {
	case 16, 24, 32:
		return k, nil
	}
	return nil, fmt.Errorf("%w: a key of %d bytes, want 16, 24 or 32", ErrKeyring, len(k))
}

// NewKey returns a new random 32-byte gossip key, base64 (Consul's
// `consul keygen`).
func NewKey() (string, error) {
	var k [32]byte
	if _, err := rand.Read(k[:]); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(k[:]), nil
}

// Fingerprint names a key without revealing it: the first 16 hex digits
// of its SHA-256.
func Fingerprint(k []byte) string {
	s := sha256.Sum256(k)
	return hex.EncodeToString(s[:8])
}

// MatchFingerprint returns the key among keys whose fingerprint starts
// with prefix (at least 8 hex digits), or an error if none or several do.
func MatchFingerprint(keys [][]byte, prefix string) ([]byte, error) {
	if len(prefix) < 8 {
		return nil, fmt.Errorf("%w: fingerprint %q: give at least 8 hex digits", ErrKeyring, prefix)
	}
	var found []byte
	for _, k := range keys {
		if strings.HasPrefix(Fingerprint(k), strings.ToLower(prefix)) {
			if found != nil {
				return nil, fmt.Errorf("%w: fingerprint %q names several keys", ErrKeyring, prefix)
			}
			found = k
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: no installed key has fingerprint %q", ErrKeyring, prefix)
	}
	return found, nil
}
