package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/store/memory"
)

// lenientUpstream behaves like Flask, Express or Rails: it upper-cases the
// method and decodes the path before routing, so "patch /payments/7" charges
// like "PATCH /payments/7". Every request it accepts is one effect.
type lenientUpstream struct {
	*httptest.Server
	effects atomic.Int64
}

func newLenientUpstream(t *testing.T) *lenientUpstream {
	u := &lenientUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch strings.ToUpper(r.Method) {
		case http.MethodPost, http.MethodPatch:
			n := u.effects.Add(1)
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"effect":%d,"method":%q,"path":%q,"query":%q,"body":%q}`, n, r.Method, r.URL.Path, r.URL.RawQuery, body)
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	}))
	t.Cleanup(u.Close)
	return u
}

func newMemoryStore(t *testing.T) retrysafe.Store {
	s := memory.New(memory.Config{})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestLowercaseMethodIsProtected: "patch" is protected like "PATCH" by the
// defaults and by a route's policy, and a keyless "patch" does not pass
// --require-key.
func TestLowercaseMethodIsProtected(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]struct {
		defaults gateway.Policy
		routes   []gateway.Route
	}{
		"defaults":          {defaults: gateway.Policy{RequireKey: true}},
		"route":             {defaults: gateway.Policy{Bypass: true}, routes: []gateway.Route{{Pattern: "PATCH /payments/{id}", Policy: gateway.Policy{RequireKey: true}}}},
		"lowercase pattern": {defaults: gateway.Policy{Bypass: true}, routes: []gateway.Route{{Pattern: "patch /payments/{id}", Policy: gateway.Policy{RequireKey: true}}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			up := newLenientUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: newMemoryStore(t), Defaults: cfg.defaults, Routes: cfg.routes})

			first := send(t, gw.URL, "patch", "/payments/7", "m-1", `{"amount":5}`)
			again := send(t, gw.URL, "patch", "/payments/7", "m-1", `{"amount":5}`)
			upper := send(t, gw.URL, "PATCH", "/payments/7", "m-1", `{"amount":5}`)
			if first.Status != http.StatusCreated || first.Header.Get(retrysafe.HeaderReplayed) != "" {
				t.Fatalf("first patch = %s", first)
			}
			for _, r := range []*result{again, upper} {
				if r.Status != http.StatusCreated || r.Header.Get(retrysafe.HeaderReplayed) != "true" || string(r.Body) != string(first.Body) {
					t.Fatalf("retry = %s (replayed %q); want the replay of %s", r, r.Header.Get(retrysafe.HeaderReplayed), first)
				}
			}
			if n := up.effects.Load(); n != 1 {
				t.Fatalf("upstream effects = %d, want 1", n)
			}

			res := send(t, gw.URL, "patch", "/payments/8", "", `{"amount":5}`)
			if res.Status != http.StatusBadRequest || problemType(t, res) != retrysafe.ProblemMissingKey {
				t.Fatalf("keyless patch = %s, want 400 %s", res, retrysafe.ProblemMissingKey)
			}
			if n := up.effects.Load(); n != 1 {
				t.Fatalf("upstream effects = %d, want 1 (the keyless patch must not reach it)", n)
			}
		})
	}
}

// TestFingerprintTellsApartWhatTheUpstreamTellsApart: requests that an
// upstream treats differently get 422 when they reuse a key, never the
// other request's replay.
func TestFingerprintTellsApartWhatTheUpstreamTellsApart(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ first, second string }{
		"escaped slash":     {"/orders/a%2Fb/refunds", "/orders/a/b/refunds"},
		"repeated params":   {"/payments?acct=1&acct=2", "/payments?acct=2&acct=1"},
		"folded body names": {`/payments {"amount":1,"Amount":1000}`, `/payments {"Amount":1000,"amount":1}`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			up := newLenientUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: newMemoryStore(t)})
			split := func(s string) (string, string) {
				path, body, _ := strings.Cut(s, " ")
				return path, body
			}
			path, body := split(tt.first)
			if res := send(t, gw.URL, "POST", path, "k-1", body); res.Status != http.StatusCreated {
				t.Fatalf("first = %s", res)
			}
			path, body = split(tt.second)
			res := send(t, gw.URL, "POST", path, "k-1", body)
			if res.Status != http.StatusUnprocessableEntity || problemType(t, res) != retrysafe.ProblemMismatch {
				t.Fatalf("second request with the same key = %s; want 422 %s", res, retrysafe.ProblemMismatch)
			}
			// The first request itself still replays.
			path, body = split(tt.first)
			if res := send(t, gw.URL, "POST", path, "k-1", body); res.Status != http.StatusCreated || res.Header.Get(retrysafe.HeaderReplayed) != "true" {
				t.Fatalf("retry of the first = %s; want its replay", res)
			}
			if n := up.effects.Load(); n != 1 {
				t.Fatalf("upstream effects = %d, want 1", n)
			}
		})
	}
}
