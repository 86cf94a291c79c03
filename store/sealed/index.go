package sealed

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
)

// index keys what a store finds records by, with the ring's [HMACKeyID]
// secret, so that neither an unsalted hash of a credential (the scope) nor
// one of a request (the fingerprint) is kept in the clear: both can be
// guessed from a short list of candidates.
//
//   - A scope is kept as its HMAC-SHA256: equal scopes map to equal
//     values, and the wrapper never needs the scope back (every call
//     names it).
//   - A fingerprint is kept encrypted deterministically (SIV: the IV is
//     the HMAC of the fingerprint, the ciphertext AES-256-CTR under that
//     IV), because the store compares it (a takeover needs an equal one)
//     and the engine compares the one Get returns with its own: equal
//     fingerprints map to equal values, and the wrapper can give the
//     fingerprint back. Only equality and length show.
//
// The keys are derived from the secret with HMAC-SHA256 and a label each.
type index struct {
	scopeKey, fpMAC []byte
	fpEnc           cipher.Block
}

// sivSize is the size of a stored fingerprint's IV and tag.
const sivSize = 16

func newIndex(secret []byte) *index {
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	block, err := aes.NewCipher(derive("retrysafe fingerprint encryption v1"))
	if err != nil {
		panic(err) // a 32-byte key: unreachable
	}
	return &index{scopeKey: derive("retrysafe scope v1"), fpMAC: derive("retrysafe fingerprint mac v1"), fpEnc: block}
}

// scope returns the stored form of scope: the hex HMAC-SHA256, or "" for
// the empty scope (callers without credentials), which holds no secret
// and which operators select as such.
func (x *index) scope(scope string) string {
	if scope == "" {
		return ""
	}
	m := hmac.New(sha256.New, x.scopeKey)
	m.Write([]byte(scope))
	return hex.EncodeToString(m.Sum(nil))
}

// sealFingerprint returns the stored form of fp: base64url(IV | AES-CTR(fp))
// with IV = HMAC-SHA256(fp)[:16].
func (x *index) sealFingerprint(fp string) string {
	b := make([]byte, sivSize+len(fp))
	copy(b, x.fingerprintTag([]byte(fp)))
	cipher.NewCTR(x.fpEnc, b[:sivSize]).XORKeyStream(b[sivSize:], []byte(fp))
	return base64.RawURLEncoding.EncodeToString(b)
}

// openFingerprint reverses sealFingerprint; ok is false for a value it
// did not make (a record stored in the clear, or under another secret).
func (x *index) openFingerprint(stored string) (fp string, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(stored)
	if err != nil || len(b) < sivSize {
		return "", false
	}
	plain := make([]byte, len(b)-sivSize)
	cipher.NewCTR(x.fpEnc, b[:sivSize]).XORKeyStream(plain, b[sivSize:])
	if !hmac.Equal(x.fingerprintTag(plain), b[:sivSize]) {
		return "", false
	}
	return string(plain), true
}

func (x *index) fingerprintTag(fp []byte) []byte {
	m := hmac.New(sha256.New, x.fpMAC)
	m.Write(fp)
	return m.Sum(nil)[:sivSize]
}

// Scope returns the scope under which a store read through [New] with r
// keeps the records of scope: its HMAC-SHA256 under the ring's
// [HMACKeyID] secret, in hex ("" stays ""). It is the scope operators see
// (Admin.List, `retrysafe keys`, the operator page) and the one Admin's
// methods take; use it to find the records of one caller, from the scope
// the engine derives for it (such as the SHA-256 of its
// Authorization header). Rotating the encryption keys does not change it.
func (r *KeyRing) Scope(scope string) string { return r.index.scope(scope) }
