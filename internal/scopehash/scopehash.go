// Package scopehash is the one hash of an identity into a scope: the root
// package's Scope functions, the gateway's operator page and the CLI's
// `keys --identity` all derive scopes with it, so that they agree.
package scopehash

import (
	"crypto/sha256"
	"encoding/hex"
)

// Sum returns the hex SHA-256 of an identity value (a credential, say), so
// that the identity itself is never stored.
func Sum(identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return hex.EncodeToString(sum[:])
}
