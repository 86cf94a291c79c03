// Package storeheader is the default rule for which response headers are
// stored for replay: the middleware's default Config.StoreHeader, and the
// filter the gateway's resolver and `retrysafe keys resolve` apply to a
// result they store, so that every stored record keeps the same headers.
package storeheader

import "github.com/retrysafe/retrysafe/internal/httpmethod"

// unstored are the names Default drops, in canonical form: the hop-by-hop
// headers, Set-Cookie, Content-Length, the replay marker and Date.
var unstored = [...]string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Set-Cookie", "Content-Length", "Idempotent-Replayed", "Date",
}

// Default is the default header filter: it keeps every header but
// hop-by-hop ones, Set-Cookie (a session must not be replayed to whoever
// retries), Content-Length (recomputed from the stored body), Date and the
// replay marker itself.
func Default(name string) bool {
	// http.CanonicalHeaderKey(name) equals one of these canonical names
	// exactly when name equals it but for ASCII case (the names are valid
	// field names, so such a name is canonicalised, and any other one is
	// not changed into it): compared that way, without canonicalising
	// name or a map look-up, for every field of every stored response.
	for _, u := range unstored {
		if httpmethod.EqualFold(name, u) {
			return false
		}
	}
	return true
}
