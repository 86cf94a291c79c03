package retrysafe_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/retrysafe/retrysafe"
)

// TestLowercaseMethodIsProtected: a method's case does not let a request
// skip protection. Many servers (Flask, Express, Rails) upper-case the
// method, so a lowercase "patch" has the effect of PATCH there.
func TestLowercaseMethodIsProtected(t *testing.T) {
	t.Parallel()
	h := &counter{}
	srv := newServer(t, retrysafe.Config{RequireKey: true}, h)

	first := send(t, srv.URL+"/payments/7", "patch", "m-1", `{"amount":5}`)
	again := send(t, srv.URL+"/payments/7", "patch", "m-1", `{"amount":5}`)
	upper := send(t, srv.URL+"/payments/7", "PATCH", "m-1", `{"amount":5}`)
	if first.status != http.StatusCreated || first.header.Get(retrysafe.HeaderReplayed) != "" {
		t.Fatalf("first patch = %d %s (replayed %q)", first.status, first.body, first.header.Get(retrysafe.HeaderReplayed))
	}
	for _, r := range []result{again, upper} {
		if r.status != http.StatusCreated || r.header.Get(retrysafe.HeaderReplayed) != "true" || string(r.body) != string(first.body) {
			t.Fatalf("retry = %d %q (replayed %q); want the replay of %q", r.status, r.body, r.header.Get(retrysafe.HeaderReplayed), first.body)
		}
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}

	wantProblem(t, send(t, srv.URL+"/payments/7", "patch", "", `{"amount":5}`), http.StatusBadRequest, retrysafe.ProblemMissingKey)
	wantProblem(t, send(t, srv.URL+"/payments", "pOsT", "", `{"amount":5}`), http.StatusBadRequest, retrysafe.ProblemMissingKey)
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1 (keyless requests must not run)", n)
	}
}

// TestMiddlewareFingerprintGolden pins the fingerprint the middleware
// computes for an ordinary request (default Route: the escaped path, equal
// to the path when nothing in it is escaped), so that keys in flight
// across an upgrade keep matching their retries.
func TestMiddlewareFingerprintGolden(t *testing.T) {
	t.Parallel()
	const body = `{"amount":1999,"currency":"eur","customer":"cus_9s6XKzkNRiz8i3","description":"Order #4711","metadata":{"order_id":"4711","requestedAt":"2026-11-29T18:00:00Z"},"payment_method":"pm_card_visa","confirm":true,"capture_method":"automatic","receipt_email":"jenny.rosen@example.com","statement_descriptor":"ACME SHOP"}`
	const want = "3468aa528c2b44598580f5a66d1605fbdc1cd17f01b4e2050484ea00aaafe88a"
	var got atomic.Value
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(retrysafe.OperationFromContext(r.Context()).Fingerprint())
		w.WriteHeader(http.StatusCreated)
	})
	srv := newServer(t, retrysafe.Config{IgnoreFields: []string{"/metadata/requestedAt"}}, h)
	if r := send(t, srv.URL+"/v1/payments?expand=customer&expand=payment_method&limit=3", "POST", "golden-1", body); r.status != http.StatusCreated {
		t.Fatalf("status %d %s", r.status, r.body)
	}
	if fp, _ := got.Load().(string); fp != want {
		t.Fatalf("fingerprint = %s, want %s (pinned: in-flight keys depend on it)", fp, want)
	}
}
