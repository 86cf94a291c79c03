package testenv

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// ScopeOf runs scope (a Config.Scope function) on a POST with the given
// header lines ("Name: value") and returns the scope; an error fails t.
func ScopeOf(t testing.TB, scope func(*http.Request) (string, error), lines ...string) string {
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
