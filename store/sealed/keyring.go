package sealed

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// KeySize is the size in bytes of every key: AES-256.
const KeySize = 32

// maxKeyIDLen bounds a key id, which is stored with every sealed response.
const maxKeyIDLen = 64

// Key is one key of a [KeyRing].
type Key struct {
	// ID names the key in every response it seals: 1 to 64 characters,
	// letters, digits, '.', '_' or '-'.
	ID string
	// Secret is the AES-256 key: 32 random bytes.
	Secret []byte
}

// HMACKeyID is the id of the one entry of a key ring that is not an
// encryption key: its secret keys the HMAC under which the store keeps
// scopes and fingerprints (see [KeyRing.Scope]). Unlike the encryption
// keys it is never rotated: records are found by it, so a new one would
// make every stored record unreachable (a retry of a request made before
// would run again). Generate it once, like a key, and keep it in the ring
// for good.
const HMACKeyID = "hmac"

// KeyRing holds the keys that seal and open stored responses, and the
// secret that keys the HMAC of scopes and fingerprints. The newest
// encryption key (the last one given) seals; every key opens what it
// sealed. Make one with [NewKeyRing] or [ParseKeyRing] (the zero value
// holds no key). A KeyRing is immutable and safe for concurrent use.
type KeyRing struct {
	ids    []string // of the encryption keys, in the order given; the last one seals
	aeads  map[string]cipher.AEAD
	newest cipher.AEAD
	index  *index // from the HMACKeyID entry
}

// NewKeyRing returns a ring of keys, oldest first: the last key seals new
// responses. Exactly one key has the id [HMACKeyID]; it keys the HMAC of
// scopes and fingerprints and seals nothing. NewKeyRing fails when there
// is no encryption key or no HMAC key, when an id is invalid or repeated,
// when a secret is not [KeySize] bytes, or when two ids share a secret.
func NewKeyRing(keys ...Key) (*KeyRing, error) {
	r := &KeyRing{aeads: make(map[string]cipher.AEAD, len(keys))}
	for i, k := range keys {
		if err := validKeyID(k.ID); err != nil {
			return nil, fmt.Errorf("sealed: key %d: %w", i+1, err)
		}
		if _, dup := r.aeads[k.ID]; dup || (k.ID == HMACKeyID && r.index != nil) {
			return nil, fmt.Errorf("sealed: key id %q appears twice: every key needs its own id", k.ID)
		}
		if len(k.Secret) != KeySize {
			return nil, fmt.Errorf("sealed: key %q is %d bytes, want %d (AES-256); generate one with: head -c 32 /dev/urandom | base64", k.ID, len(k.Secret), KeySize)
		}
		for _, prev := range keys[:i] {
			if bytes.Equal(prev.Secret, k.Secret) {
				return nil, fmt.Errorf("sealed: keys %q and %q have the same secret: a new key must be new random bytes", prev.ID, k.ID)
			}
		}
		if k.ID == HMACKeyID {
			r.index = newIndex(k.Secret)
			continue
		}
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("sealed: key %q: %w", k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("sealed: key %q: %w", k.ID, err)
		}
		r.ids = append(r.ids, k.ID)
		r.aeads[k.ID] = aead
		r.newest = aead
	}
	switch {
	case len(r.ids) == 0:
		return nil, errors.New("sealed: the key ring has no encryption key: give at least one key besides " + HMACKeyID)
	case r.index == nil:
		return nil, errors.New(noHMACKey)
	}
	return r, nil
}

// noHMACKey says how to add the HMAC key to a ring that lacks it.
const noHMACKey = "sealed: the key ring has no " + HMACKeyID + " entry: add one line " + HMACKeyID + ":BASE64 " +
	"(32 random bytes: head -c 32 /dev/urandom | base64), once; it keys the HMAC of scopes and fingerprints, " +
	"is never rotated, and must be the same on every instance sharing a store"

// IDs returns the ids of the ring's encryption keys, oldest first; the
// last one seals. The [HMACKeyID] entry is not among them.
func (r *KeyRing) IDs() []string { return slices.Clone(r.ids) }

// Newest returns the id of the key that seals new responses.
func (r *KeyRing) Newest() string { return r.ids[len(r.ids)-1] }

func validKeyID(id string) error {
	if id == "" {
		return errors.New("empty key id: write ID:BASE64, e.g. 2026-11:…")
	}
	if len(id) > maxKeyIDLen {
		return fmt.Errorf("key id %q is longer than %d characters", id, maxKeyIDLen)
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("key id %q: character %q is not allowed (use letters, digits, '.', '_' and '-')", id, c)
		}
	}
	return nil
}

// ParseKeyRing parses a key ring in the key file format, the format of
// `retrysafe serve --encryption-keys-file` and of the environment variable
// RETRYSAFE_ENCRYPTION_KEYS:
//
//	# retrysafe response encryption keys, oldest first.
//	# The last key seals new responses; every key opens what it sealed.
//	# hmac keys the scopes and fingerprints: generated once, never rotated.
//	hmac:nB0c7mTq2ZK4yVd1Ls9Xw6Re3Hf8Ja5Up0Gi2Ok7Qz4=
//	2026-06:q3v7A0h2d1mYb4c8Lx9u2Rk5Z1s0Wn6Ee3Tf7Gp8Jy4=
//	2026-11:Xw3M9f0R1qk5s7PZ2c8bN4vL6yH0tG1dJ5eA9uK3oQw=
//
// Each entry is ID:SECRET, where ID is 1 to 64 letters, digits, '.', '_'
// or '-', and SECRET is 32 bytes in standard base64 (with or without
// padding). The entry with the id [HMACKeyID] ("hmac") is required: it
// keys the HMAC of scopes and fingerprints, and stays when the encryption
// keys rotate. Entries are separated by newlines, commas or spaces (so an
// environment variable can hold several on one line); '#' starts a comment
// that runs to the end of the line. Entries come oldest first: the last
// one seals. Errors name the line and say what to fix; they never quote a
// secret.
func ParseKeyRing(data []byte) (*KeyRing, error) {
	var keys []Key
	for n, line := range strings.Split(string(data), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		for _, entry := range strings.FieldsFunc(line, func(c rune) bool {
			return c == ',' || c == ' ' || c == '\t' || c == '\r'
		}) {
			k, err := parseKeyEntry(entry)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys: write one key per line as ID:BASE64 (32 random bytes, e.g. from: head -c 32 /dev/urandom | base64), and one line " + HMACKeyID + ":BASE64")
	}
	return NewKeyRing(keys...)
}

func parseKeyEntry(entry string) (Key, error) {
	id, secret, ok := strings.Cut(entry, ":")
	if !ok {
		return Key{}, errors.New("an entry has no ':': write ID:BASE64")
	}
	if err := validKeyID(id); err != nil {
		return Key{}, err
	}
	secret = strings.TrimRight(secret, "=")
	b, err := base64.RawStdEncoding.DecodeString(secret)
	if err != nil {
		return Key{}, fmt.Errorf("key %q: the secret is not standard base64", id)
	}
	if len(b) != KeySize {
		return Key{}, fmt.Errorf("key %q: the secret is %d bytes, want %d (generate one with: head -c 32 /dev/urandom | base64)", id, len(b), KeySize)
	}
	return Key{ID: id, Secret: b}, nil
}
