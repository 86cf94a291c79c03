package gateway_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// TestScopeSources: callers are told apart by the configured headers and
// cookie; a keyed request without any of them gets 400 empty-scope, is
// counted, and reaches nothing, unless the route allows empty scopes.
func TestScopeSources(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	platform := gateway.DefaultPolicy()
	platform.ScopeHeaders = []string{"Authorization", "Stripe-Account"}
	sessions := gateway.DefaultPolicy()
	sessions.ScopeCookie = "session"
	open := gateway.DefaultPolicy()
	open.AllowEmptyScope = true
	log := &syncBuffer{}
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: testenv.Memory(t),
		Logger: slog.New(slog.NewTextHandler(log, nil)),
		Routes: []gateway.Route{
			{Pattern: "POST /payments", Policy: platform},
			{Pattern: "POST /orders/{id}/refunds", Policy: sessions},
			{Pattern: "POST /other", Policy: open},
		}})
	if n := strings.Count(log.String(), "empty scopes allowed"); n != 1 || !strings.Contains(log.String(), "POST /other") {
		t.Errorf("start-up log has %d empty-scope warnings, want 1 naming POST /other:\n%s", n, log)
	}

	key := newKey()
	acctA := send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`, "Stripe-Account", "acct_A")
	acctB := send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`, "Stripe-Account", "acct_B")
	if acctA.Status != 201 || acctB.Status != 201 || acctB.Header.Get(retrysafe.HeaderReplayed) != "" || string(acctA.Body) == string(acctB.Body) {
		t.Errorf("one platform key, two Stripe-Accounts: %s / %s (replayed %q); want two executions",
			acctA, acctB, acctB.Header.Get(retrysafe.HeaderReplayed))
	}

	key = newKey()
	alice := send(t, gw.URL, "POST", "/orders/7/refunds", key, `{}`, "Authorization", "", "Cookie", "session=alice; _ga=1")
	bob := send(t, gw.URL, "POST", "/orders/7/refunds", key, `{}`, "Authorization", "", "Cookie", "session=bob; _ga=1")
	again := send(t, gw.URL, "POST", "/orders/7/refunds", key, `{}`, "Authorization", "", "Cookie", "_ga=2; session=alice")
	if alice.Status != 201 || bob.Status != 201 || string(alice.Body) == string(bob.Body) {
		t.Errorf("two sessions, one key: %s / %s; want two executions", alice, bob)
	}
	if again.Header.Get(retrysafe.HeaderReplayed) != "true" || string(again.Body) != string(alice.Body) {
		t.Errorf("alice with another analytics cookie: %s (replayed %q); want her replay", again, again.Header.Get(retrysafe.HeaderReplayed))
	}

	calls := up.calls.Load()
	for _, path := range []string{"/payments", "/orders/7/refunds", "/anything"} {
		res := send(t, gw.URL, "POST", path, newKey(), `{}`, "Authorization", "", "Cookie", "_ga=1")
		if res.Status != http.StatusBadRequest || problemType(t, res) != retrysafe.ProblemEmptyScope {
			t.Errorf("POST %s without a scope: %s, want 400 empty-scope", path, res)
			continue
		}
		var p retrysafe.Problem
		_ = json.Unmarshal(res.Body, &p)
		if want := map[string]string{"/payments": "Stripe-Account header", "/orders/7/refunds": "session cookie", "/anything": "Authorization header"}[path]; !strings.Contains(p.Detail, want) {
			t.Errorf("POST %s: detail %q does not name the %s", path, p.Detail, want)
		}
	}
	if n := up.calls.Load(); n != calls {
		t.Errorf("refused requests reached the upstream %d times", n-calls)
	}
	if res := send(t, gw.URL, "POST", "/other", newKey(), `{}`, "Authorization", ""); res.Status != 201 {
		t.Errorf("allow_empty_scope route: %s, want 201", res)
	}
	if res := send(t, gw.URL, "POST", "/payments", "", `{}`, "Authorization", ""); res.Status != 201 {
		t.Errorf("no key (passed through): %s, want 201", res)
	}
	metrics := string(send(t, gw.AdminURL, "GET", "/metrics", "", "").Body)
	if v := metricValue(t, metrics, `retrysafe_requests_total{outcome="empty_scope"}`); v != 3 {
		t.Errorf(`retrysafe_requests_total{outcome="empty_scope"} = %v, want 3`, v)
	}
}

// TestStripeDialectOfGatewayErrors: the gateway's own errors carry
// Stripe's error member in the stripe dialect, with Stripe-Should-Retry,
// and not in the default one.
func TestStripeDialectOfGatewayErrors(t *testing.T) {
	t.Parallel()
	stripe := gateway.DefaultPolicy()
	stripe.ErrorDialect = retrysafe.DialectStripe
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Store: testenv.Memory(t),
		Routes: []gateway.Route{{Pattern: "POST /payments", Policy: stripe}}})
	for path, dialect := range map[string]retrysafe.ErrorDialect{"/payments": retrysafe.DialectStripe, "/other": retrysafe.DialectProblem} {
		res := send(t, gw.URL, "POST", path, newKey(), `{}`) // port 1: connection refused
		if res.Status != http.StatusBadGateway || problemType(t, res) != gateway.ProblemUpstreamUnreachable {
			t.Fatalf("POST %s: %s, want 502 upstream-unreachable", path, res)
		}
		var p retrysafe.Problem
		if err := json.Unmarshal(res.Body, &p); err != nil {
			t.Fatal(err)
		}
		retry := res.Header.Get(retrysafe.HeaderStripeShouldRetry)
		switch dialect {
		case retrysafe.DialectStripe:
			if p.Error == nil || p.Error.Type != retrysafe.StripeAPIError || p.Error.Code != gateway.ProblemUpstreamUnreachable || p.Error.Message != p.Detail || retry != "true" {
				t.Errorf("stripe dialect: error %+v, Stripe-Should-Retry %q; want api_error upstream-unreachable, retry true", p.Error, retry)
			}
		default:
			if p.Error != nil || retry != "" {
				t.Errorf("problem dialect: error %+v, Stripe-Should-Retry %q; want neither", p.Error, retry)
			}
		}
	}
}

func TestParseConfigScopeAndDialect(t *testing.T) {
	t.Parallel()
	routes, err := gateway.ParseConfig([]byte(`
routes:
  - match: "POST /a"
    scope_header: X-Api-Key
  - match: "POST /b"
    scope_header: [Authorization, Stripe-Account]
    error_dialect: stripe
  - match: "POST /c"
    scope_header: []
    scope_cookie: session
    allow_empty_scope: true
  - match: "POST /d"
`), gateway.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		headers string
		cookie  string
		allow   bool
		dialect retrysafe.ErrorDialect
	}
	want := []got{
		{"X-Api-Key", "", false, ""},
		{"Authorization,Stripe-Account", "", false, retrysafe.DialectStripe},
		{"", "session", true, ""},
		{"Authorization", "", false, ""},
	}
	for i, rt := range routes {
		p := rt.Policy
		if g := (got{strings.Join(p.ScopeHeaders, ","), p.ScopeCookie, p.AllowEmptyScope, p.ErrorDialect}); g != want[i] {
			t.Errorf("%s: %+v, want %+v", rt.Pattern, g, want[i])
		}
	}
	// The zero Policy (Authorization) as defaults: a route that names no
	// scope source keeps it.
	if rs, err := gateway.ParseConfig([]byte("routes:\n  - match: \"POST /x\"\n"), gateway.Policy{}); err != nil || len(rs[0].Policy.ScopeHeaders) != 0 {
		t.Errorf("zero defaults: %v, %v; want the route to keep them", rs, err)
	}
	for name, tc := range map[string]struct{ yaml, want string }{
		"bad header":  {"scope_header: [Authorization, \"X Y\"]", `scope_header: "X Y" is not a header name`},
		"bad cookie":  {"scope_cookie: \"a;b\"", `scope_cookie: "a;b" is not a cookie name`},
		"no scope":    {"scope_header: []", "scope_header: empty list and no scope_cookie"},
		"bad dialect": {"error_dialect: graphql", `error_dialect: "graphql" is not "problem" or "stripe"`},
		"bad allow":   {"allow_empty_scope: maybe", "allow_empty_scope"},
	} {
		_, err := gateway.ParseConfig([]byte("routes:\n  - match: \"POST /x\"\n    "+tc.yaml+"\n"), gateway.DefaultPolicy())
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "POST /x") {
			t.Errorf("%s: %v, want an error naming the route and %q", name, err, tc.want)
		}
	}
}
