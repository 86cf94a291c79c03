package gateway

import (
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

func TestScopeFromHeadersAndCookie(t *testing.T) {
	t.Parallel()
	both := scopeFromHeadersAndCookie([]string{"Authorization"}, "session")
	header := testenv.ScopeOf(t, both, "Authorization: Bearer k")
	if header != scopehash.Sum("Bearer k") {
		t.Error("a caller who sends only the header does not get the header's scope")
	}
	cookie := testenv.ScopeOf(t, both, "Cookie: session=s1")
	if cookie != testenv.ScopeOf(t, retrysafe.ScopeFromCookie("session"), "Cookie: session=s1") {
		t.Error("a caller who sends only the cookie does not get the cookie's scope")
	}
	if s := testenv.ScopeOf(t, both, "Authorization: Bearer k", "Cookie: session=s1"); s == header || s == cookie || s == "" {
		t.Errorf("header and cookie together: %q, want a scope of its own", s)
	}
	if s := testenv.ScopeOf(t, both, "Cookie: other=1"); s != "" {
		t.Errorf("neither: %q, want empty", s)
	}
}
