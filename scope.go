package retrysafe

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/retrysafe/retrysafe/internal/scopehash"
)

// ScopeFromHeaders returns a Scope function that identifies the caller by
// the SHA-256 of request headers' values (so the credential itself is
// never stored), such as ScopeFromHeaders("Authorization"), the default,
// or ScopeFromHeaders("Authorization", "Stripe-Account") for a platform
// key plus the account it acts for. The scope is empty only when none of
// the headers has a non-empty value; the middleware refuses an empty
// scope when Config.RequireScope is set.
//
// With one name, the scope is the hash of the header's fields joined with
// "\n". With several, they are hashed together in the order given, each
// header's name and its values length-prefixed, so that values cannot be
// shifted from one header into another: A: "x,y" with no B is not A: "x"
// with B: "y". A gateway that goes from one scope header to a list
// starting with it does not change the scopes of callers who send only
// the first.
func ScopeFromHeaders(names ...string) func(*http.Request) (string, error) {
	if len(names) == 1 {
		name := http.CanonicalHeaderKey(names[0])
		return func(r *http.Request) (string, error) {
			v := r.Header[name] // as Header.Values: name is canonical
			if allEmpty(v) {
				return "", nil
			}
			return scopehash.Sum(strings.Join(v, "\n")), nil
		}
	}
	canon := make([]string, len(names))
	for i, n := range names {
		canon[i] = http.CanonicalHeaderKey(n)
	}
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		b.WriteString("headers\x00")
		present := false
		for _, name := range canon {
			v := r.Header[name] // as Header.Values: name is canonical
			if !allEmpty(v) {
				present = true
			}
			writeParts(&b, name, v)
		}
		if !present {
			return "", nil
		}
		return scopehash.Sum(b.String()), nil
	}
}

// ScopeFromCookie returns a Scope function that identifies the caller by the
// value of one named cookie (a session cookie, say), parsed from the Cookie
// header as net/http parses it. Only that cookie counts: other cookies can
// come, go, change or be reordered without changing the scope. Several
// cookies of that name (set for different paths) count in the order sent.
// A request without the cookie, or with an empty value, has the empty scope.
func ScopeFromCookie(name string) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		var values []string
		for _, c := range r.CookiesNamed(name) {
			values = append(values, c.Value)
		}
		if allEmpty(values) {
			return "", nil
		}
		var b strings.Builder
		b.WriteString("cookie\x00")
		writeParts(&b, name, values)
		return scopehash.Sum(b.String()), nil
	}
}

// writeParts appends name and its values to b, each length-prefixed.
func writeParts(b *strings.Builder, name string, values []string) {
	b.WriteString(strconv.Itoa(len(name)))
	b.WriteByte(':')
	b.WriteString(name)
	b.WriteString(strconv.Itoa(len(values)))
	b.WriteByte('#')
	for _, v := range values {
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
}

// allEmpty reports whether every value is empty (or there are none).
func allEmpty(values []string) bool {
	for _, v := range values {
		if v != "" {
			return false
		}
	}
	return true
}

// refuseEmptyScope answers a keyed request whose scope came out empty.
func (h *protectedHandler) refuseEmptyScope(w http.ResponseWriter) Outcome {
	c := h.cfg
	source := c.ScopeSource
	if source == "" {
		source = "the credential this service identifies its callers by"
	}
	WriteProblem(w, c.problem(ProblemEmptyScope, "No caller identity for the Idempotency-Key", http.StatusBadRequest,
		fmt.Sprintf("Idempotency keys are kept per caller, and this request carries nothing that identifies its caller, so nothing was processed. "+
			"Send %s with the request. (If all such callers may share one key space, the operator can allow it: retrysafe serve --allow-empty-scope, a route's allow_empty_scope: true, or Config.RequireScope false in the library.)", source)), 0)
	return OutcomeEmptyScope
}
