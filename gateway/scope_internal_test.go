package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/scopehash"
)

// scopeOf runs scope on a POST with the given header lines ("Name: value").
func scopeOf(t *testing.T, scope func(*http.Request) (string, error), lines ...string) string {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/x", nil)
	for _, l := range lines {
		k, v, _ := strings.Cut(l, ": ")
		r.Header.Add(k, v)
	}
	s, err := scope(r)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestScopeFromHeadersAndCookie(t *testing.T) {
	t.Parallel()
	both := scopeFromHeadersAndCookie([]string{"Authorization"}, "session")
	header := scopeOf(t, both, "Authorization: Bearer k")
	if header != scopehash.Sum("Bearer k") {
		t.Error("a caller who sends only the header does not get the header's scope")
	}
	cookie := scopeOf(t, both, "Cookie: session=s1")
	if cookie != scopeOf(t, retrysafe.ScopeFromCookie("session"), "Cookie: session=s1") {
		t.Error("a caller who sends only the cookie does not get the cookie's scope")
	}
	if s := scopeOf(t, both, "Authorization: Bearer k", "Cookie: session=s1"); s == header || s == cookie || s == "" {
		t.Errorf("header and cookie together: %q, want a scope of its own", s)
	}
	if s := scopeOf(t, both, "Cookie: other=1"); s != "" {
		t.Errorf("neither: %q, want empty", s)
	}
}
