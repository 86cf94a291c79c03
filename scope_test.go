package retrysafe_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/memory"
)

func TestScopeFromHeaderUnchanged(t *testing.T) {
	t.Parallel()
	one := retrysafe.ScopeFromHeaders("Authorization")
	// Stored records carry these scopes: the single-header hash must not change.
	if got, want := testenv.ScopeOf(t, one, "Authorization: Bearer alice"), scopehash.Sum("Bearer alice"); got != want {
		t.Errorf("one field: %s, want the hash of the value %s", got, want)
	}
	if got, want := testenv.ScopeOf(t, one, "Authorization: a", "Authorization: b"), scopehash.Sum("a\nb"); got != want {
		t.Errorf("two fields: %s, want the hash of \"a\\nb\" %s", got, want)
	}
	if got := retrysafe.ScopeFromHeaders("authorization"); testenv.ScopeOf(t, got, "Authorization: Bearer alice") != scopehash.Sum("Bearer alice") {
		t.Error("ScopeFromHeaders with one name is not the one-header scope")
	}
	for name, lines := range map[string][]string{"absent": nil, "empty value": {"Authorization: "}} {
		if s := testenv.ScopeOf(t, one, lines...); s != "" {
			t.Errorf("%s: scope %q, want empty", name, s)
		}
	}
}

func TestScopeFromHeadersIsUnambiguous(t *testing.T) {
	t.Parallel()
	ab := retrysafe.ScopeFromHeaders("A", "B")
	scopes := map[string][]string{
		"A=x,y":    {"A: x,y"},
		"A=x B=y":  {"A: x", "B: y"},
		"A=x A=y":  {"A: x", "A: y"},
		"B=x,y":    {"B: x,y"},
		"A=x":      {"A: x"},
		"B=x":      {"B: x"},
		"A=xB B=":  {"A: xB"},
		"A=x B=Bx": {"A: x", "B: Bx"},
		"A=1:x":    {"A: 1:x"},
		"A=y B=x":  {"A: y", "B: x"},
	}
	seen := map[string]string{}
	for name, lines := range scopes {
		s := testenv.ScopeOf(t, ab, lines...)
		if s == "" {
			t.Errorf("%s: empty scope", name)
		}
		if other, ok := seen[s]; ok {
			t.Errorf("%s and %s have the same scope", name, other)
		}
		seen[s] = name
	}
	if testenv.ScopeOf(t, ab, "A: x", "B: y") != testenv.ScopeOf(t, ab, "B: y", "A: x") {
		t.Error("the order of the fields in the request changes the scope")
	}
	if testenv.ScopeOf(t, ab, "A: x", "B: y") == testenv.ScopeOf(t, retrysafe.ScopeFromHeaders("B", "A"), "A: x", "B: y") {
		t.Error("the order of the names does not count")
	}
	if testenv.ScopeOf(t, ab, "A: x") == testenv.ScopeOf(t, retrysafe.ScopeFromHeaders("A"), "A: x") {
		t.Error("two names with only the first sent give the one-name scope; want them apart")
	}
	for name, lines := range map[string][]string{"none": nil, "empty values": {"A: ", "B: "}, "another header": {"C: x"}} {
		if s := testenv.ScopeOf(t, ab, lines...); s != "" {
			t.Errorf("%s: scope %q, want empty", name, s)
		}
	}
}

func TestScopeFromCookie(t *testing.T) {
	t.Parallel()
	sc := retrysafe.ScopeFromCookie("session")
	alice := testenv.ScopeOf(t, sc, "Cookie: session=alice; _ga=GA1.1.111")
	for name, lines := range map[string][]string{
		"analytics refreshed": {"Cookie: session=alice; _ga=GA1.1.999"},
		"reordered":           {"Cookie: _ga=GA1.1.111; session=alice"},
		"two Cookie fields":   {"Cookie: theme=dark", "Cookie: session=alice"},
		"no other cookies":    {"Cookie: session=alice"},
	} {
		if s := testenv.ScopeOf(t, sc, lines...); s != alice {
			t.Errorf("%s: scope %s, want alice's %s", name, s, alice)
		}
	}
	if s := testenv.ScopeOf(t, sc, "Cookie: session=bob; _ga=GA1.1.111"); s == alice || s == "" {
		t.Errorf("bob's scope %q: want his own", s)
	}
	if alice == scopehash.Sum("alice") || alice == testenv.ScopeOf(t, retrysafe.ScopeFromHeaders("X"), "X: alice") {
		t.Error("a cookie's scope equals a header's with the same value")
	}
	for name, lines := range map[string][]string{
		"no cookie": nil, "other cookies only": {"Cookie: _ga=1; sessionid=alice"}, "empty value": {"Cookie: session="},
		"a header of that name": {"Session: alice"},
	} {
		if s := testenv.ScopeOf(t, sc, lines...); s != "" {
			t.Errorf("%s: scope %q, want empty", name, s)
		}
	}
}

// refusalHandler counts its runs.
type refusalHandler struct{ runs atomic.Int64 }

func (h *refusalHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.runs.Add(1)
	w.WriteHeader(http.StatusCreated)
}

func serveOne(t *testing.T, h http.Handler, cfg retrysafe.Config, key string, lines ...string) *httptest.ResponseRecorder {
	t.Helper()
	if cfg.Store == nil {
		s := memory.New(memory.Config{})
		t.Cleanup(func() { _ = s.Close() })
		cfg.Store = s
	}
	mw, err := retrysafe.NewMiddleware(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":1}`))
	if key != "" {
		r.Header.Set(retrysafe.HeaderKey, key)
	}
	for _, l := range lines {
		k, v, _ := strings.Cut(l, ": ")
		r.Header.Add(k, v)
	}
	w := httptest.NewRecorder()
	mw(h).ServeHTTP(w, r)
	return w
}

func decodeProblem(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != retrysafe.ContentTypeProblem {
		t.Fatalf("Content-Type %q, want problem+json; body %s", ct, w.Body)
	}
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRequireScope(t *testing.T) {
	t.Parallel()
	h := &refusalHandler{}
	w := serveOne(t, h, retrysafe.Config{RequireScope: true}, "k1")
	if w.Code != http.StatusBadRequest || h.runs.Load() != 0 {
		t.Fatalf("keyed request without Authorization: %d, %d runs; want 400 and nothing run", w.Code, h.runs.Load())
	}
	p := decodeProblem(t, w)
	if p["type"] != retrysafe.DefaultProblemBase+retrysafe.ProblemEmptyScope || !strings.Contains(p["detail"].(string), "Authorization header") {
		t.Errorf("problem %v: want type empty-scope and a detail naming the Authorization header", p)
	}
	w = serveOne(t, h, retrysafe.Config{RequireScope: true, Scope: retrysafe.ScopeFromCookie("sid"), ScopeSource: "the sid cookie"}, "k1", "Authorization: Bearer x")
	if p := decodeProblem(t, w); w.Code != http.StatusBadRequest || !strings.Contains(p["detail"].(string), "the sid cookie") {
		t.Errorf("custom scope: %d %v, want 400 naming the sid cookie", w.Code, p)
	}
	if w := serveOne(t, h, retrysafe.Config{RequireScope: true}, "k1", "Authorization: Bearer x"); w.Code != http.StatusCreated {
		t.Errorf("with Authorization: %d, want 201", w.Code)
	}
	if w := serveOne(t, h, retrysafe.Config{RequireScope: true}, ""); w.Code != http.StatusCreated {
		t.Errorf("without a key (passed through): %d, want 201", w.Code)
	}
	// The library's default lets such requests run, in one shared scope.
	if w := serveOne(t, h, retrysafe.Config{}, "k1"); w.Code != http.StatusCreated {
		t.Errorf("RequireScope off: %d, want 201", w.Code)
	}
	if n := h.runs.Load(); n != 3 {
		t.Errorf("handler runs %d, want 3", n)
	}
}

func TestStripeDialect(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Config{})
	t.Cleanup(func() { _ = s.Close() })
	h := &refusalHandler{}
	auth := "Authorization: Bearer x"
	for _, d := range []retrysafe.ErrorDialect{"", retrysafe.DialectProblem, retrysafe.DialectStripe} {
		cfg := retrysafe.Config{Store: s, ErrorDialect: d, RequireKey: true, RequireScope: true}
		key := "k-" + string(d)
		if w := serveOne(t, h, cfg, key, auth); w.Code != http.StatusCreated {
			t.Fatalf("%q: first request %d", d, w.Code)
		}
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":2}`))
		r.Header.Set(retrysafe.HeaderKey, key)
		r.Header.Set("Authorization", "Bearer x")
		mw, err := retrysafe.NewMiddleware(cfg)
		if err != nil {
			t.Fatal(err)
		}
		mismatch := httptest.NewRecorder()
		mw(h).ServeHTTP(mismatch, r)
		for name, tc := range map[string]struct {
			w           *httptest.ResponseRecorder
			status      int
			slug, typ   string
			shouldRetry string
		}{
			"mismatch":    {mismatch, 422, retrysafe.ProblemMismatch, retrysafe.StripeIdempotencyError, "false"},
			"missing key": {serveOne(t, h, cfg, "", auth), 400, retrysafe.ProblemMissingKey, retrysafe.StripeIdempotencyError, "false"},
			"empty scope": {serveOne(t, h, cfg, "k"), 400, retrysafe.ProblemEmptyScope, retrysafe.StripeIdempotencyError, "false"},
		} {
			p := decodeProblem(t, tc.w)
			if tc.w.Code != tc.status || p["type"] != retrysafe.DefaultProblemBase+tc.slug {
				t.Fatalf("%q %s: %d %v", d, name, tc.w.Code, p)
			}
			e, has := p["error"].(map[string]any)
			retry := tc.w.Header().Get(retrysafe.HeaderStripeShouldRetry)
			if d != retrysafe.DialectStripe {
				if has || retry != "" {
					t.Errorf("%q %s: error member %v, Stripe-Should-Retry %q; want neither", d, name, p["error"], retry)
				}
				continue
			}
			if !has || e["type"] != tc.typ || e["code"] != tc.slug || e["message"] != p["detail"] || retry != tc.shouldRetry {
				t.Errorf("stripe %s: error %v, Stripe-Should-Retry %q; want type %s, code %s, the detail as message, retry %s",
					name, p["error"], retry, tc.typ, tc.slug, tc.shouldRetry)
			}
		}
	}
	if _, err := retrysafe.NewMiddleware(retrysafe.Config{Store: s, ErrorDialect: "graphql"}); err == nil || !strings.Contains(err.Error(), "ErrorDialect") {
		t.Errorf("unknown dialect: %v, want an error naming ErrorDialect", err)
	}
}
