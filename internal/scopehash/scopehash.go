// Package scopehash is the one hash of an identity into a scope: the root
// package's Scope functions, the gateway's operator page and the CLI's
// `keys --identity` all derive scopes with it, so that they agree.
package scopehash

import (
	"crypto/sha256"
	"encoding/hex"
)

// Sum returns the hex SHA-256 of an identity value (a credential, say), so
// that the identity itself is never stored. It takes the bytes of a
// request header as they are, so that an adapter need not copy a
// credential into a string only to hash it.
func Sum[T ~string | ~[]byte](identity T) string {
	sum := sha256.Sum256([]byte(identity))
	var digits [2 * sha256.Size]byte
	hex.Encode(digits[:], sum[:])
	return string(digits[:])
}
