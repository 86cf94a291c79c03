// Package httpmethod is the one rule by which retrysafe compares HTTP
// methods, shared by the middleware, the fingerprint, the client's
// transport, the gateway's routes and the OpenTelemetry labels: ASCII
// letters compare without case, nothing else does.
package httpmethod

import "net/http"

// Default is what a nil list of protected methods means: POST and PATCH.
var Default = []string{http.MethodPost, http.MethodPatch}

// Canonical returns method with its ASCII letters upper-cased, so "patch"
// is protected like "PATCH" and a retry that changes only the case of its
// method is the same request. Non-ASCII bytes are left as they are (they
// are not valid in a method, and Unicode case mapping would equate "poſt"
// with "POST").
func Canonical(method string) string {
	for i := 0; i < len(method); i++ {
		if c := method[i]; 'a' <= c && c <= 'z' {
			b := []byte(method)
			for j := i; j < len(b); j++ {
				if 'a' <= b[j] && b[j] <= 'z' {
					b[j] -= 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return method
}

// Protected reports whether method is one of methods under [Canonical],
// that is, comparing ASCII case-insensitively. Nil methods means
// [Default].
func Protected(methods []string, method string) bool {
	if methods == nil {
		methods = Default
	}
	for _, m := range methods {
		if EqualFold(m, method) {
			return true
		}
	}
	return false
}

// EqualFold reports whether a and b are equal when ASCII letters are
// upper-cased: methods under [Canonical], and header field names, which
// are ASCII tokens too.
func EqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
