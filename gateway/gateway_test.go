package gateway_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
)

// scenario is one row of the design's HTTP table, run through the proxy
// against one store.
type scenario struct {
	name string
	run  func(t *testing.T, store retrysafe.Store)
}

// TestHTTPTable runs every row of the HTTP behaviour table through the
// gateway on real sockets, for every store backend.
func TestHTTPTable(t *testing.T) {
	t.Parallel()
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			store := k.open(t)
			for _, sc := range scenarios() {
				t.Run(sc.name, func(t *testing.T) {
					t.Parallel()
					sc.run(t, store)
				})
			}
		})
	}
}

func scenarios() []scenario {
	return []scenario{
		{"get passes through", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store, Defaults: gateway.Policy{RequireKey: true}})
			for range 2 {
				res := send(t, gw.URL, "GET", "/items", newKey(), "")
				if res.Status != 200 || string(res.Body) != "items\n" || res.Header.Get(retrysafe.HeaderReplayed) != "" {
					t.Fatalf("GET = %s (replayed %q)", res, res.Header.Get(retrysafe.HeaderReplayed))
				}
			}
		}},
		{"unprotected methods pass through with a key", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store})
			key := newKey()
			methods := []string{"GET", "HEAD", "PUT", "DELETE", "OPTIONS"}
			for _, m := range methods {
				for range 2 {
					res := send(t, gw.URL, m, "/any", key, "")
					if res.Status != 200 || res.Header.Get(retrysafe.HeaderReplayed) != "" {
						t.Fatalf("%s = %s (replayed %q)", m, res, res.Header.Get(retrysafe.HeaderReplayed))
					}
				}
			}
			if n := up.anyCalls.Load(); n != int64(2*len(methods)) {
				t.Fatalf("upstream calls = %d, want %d", n, 2*len(methods))
			}
		}},
		{"patch is protected", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store})
			key := newKey()
			first := send(t, gw.URL, "PATCH", "/payments/7", key, `{"amount":3}`)
			again := send(t, gw.URL, "PATCH", "/payments/7", key, `{"amount":3}`)
			if first.Status != 201 || !bytes.Equal(first.Body, again.Body) || again.Header.Get(retrysafe.HeaderReplayed) != "true" {
				t.Fatalf("PATCH twice = %s, then %s", first, again)
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream calls = %d, want 1", n)
			}
		}},
		{"fail-open forwards unprotected while the store is down", func(t *testing.T, store retrysafe.Store) {
			flaky := &flakyStore{Store: store}
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: flaky, FailOpen: true})
			flaky.down.Store(true)
			key := newKey()
			for range 2 {
				if res := send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`); res.Status != 201 {
					t.Fatalf("answer while down (fail-open) = %s", res)
				}
			}
			if n := up.calls.Load(); n != 2 {
				t.Fatalf("upstream calls = %d, want 2 (unprotected while down)", n)
			}
		}},
		{"post without key passes through when optional", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store})
			for range 2 {
				if res := send(t, gw.URL, "POST", "/other", "", `{"a":1}`); res.Status != 201 {
					t.Fatalf("POST = %s", res)
				}
			}
			if n := up.calls.Load(); n != 2 {
				t.Fatalf("upstream calls = %d, want 2 (unprotected)", n)
			}
		}},
		{"key and forwarded headers reach the upstream", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store})
			for _, key := range []string{newKey(), `"` + newKey() + `"`} {
				// Forwarding headers from the client are not trusted.
				res := send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`,
					"X-Forwarded-For", "203.0.113.9", "X-Forwarded-Host", "evil.example", "Forwarded", "for=203.0.113.9")
				if res.Status != 201 {
					t.Fatalf("POST = %s", res)
				}
				seen := up.lastSeen()
				if got := seen.Header.Get("Forwarded"); got != "" {
					t.Errorf("Forwarded = %q, want it dropped", got)
				}
				if got := seen.Header.Get("Idempotency-Key"); got != key {
					t.Errorf("upstream got Idempotency-Key %q, want %q unchanged", got, key)
				}
				if got := seen.Header.Get("X-Forwarded-For"); got != "127.0.0.1" {
					t.Errorf("X-Forwarded-For = %q", got)
				}
				if got := seen.Header.Get("X-Forwarded-Host"); got != strings.TrimPrefix(gw.URL, "http://") {
					t.Errorf("X-Forwarded-Host = %q, want %q", got, strings.TrimPrefix(gw.URL, "http://"))
				}
				if got := seen.Header.Get("X-Forwarded-Proto"); got != "http" {
					t.Errorf("X-Forwarded-Proto = %q", got)
				}
			}
		}},
		{"completed key replays byte for byte", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store})
			key := newKey()
			first := send(t, gw.URL, "POST", "/payments", key, `{"amount":100,"currency":"EUR"}`)
			if first.Status != 201 || first.Header.Get(retrysafe.HeaderReplayed) != "" {
				t.Fatalf("first = %s", first)
			}
			// Same key, same JSON with other key order and spacing, and the
			// key as a Structured-Field string: the same operation.
			for _, tc := range []struct{ key, body string }{
				{key, `{"amount":100,"currency":"EUR"}`},
				{`"` + key + `"`, `{ "currency": "EUR", "amount": 100 }`},
			} {
				again := send(t, gw.URL, "POST", "/payments", tc.key, tc.body)
				if again.Status != first.Status || !bytes.Equal(again.Body, first.Body) {
					t.Fatalf("replay = %s, want %s", again, first)
				}
				if got := again.Header.Get(retrysafe.HeaderReplayed); got != "true" {
					t.Errorf("Idempotent-Replayed = %q, want true", got)
				}
				for _, h := range []string{"Content-Type", "Location", "X-Charge"} {
					if again.Header.Get(h) != first.Header.Get(h) {
						t.Errorf("%s = %q, want %q", h, again.Header.Get(h), first.Header.Get(h))
					}
				}
				if again.Header.Get("Set-Cookie") != "" {
					t.Errorf("Set-Cookie replayed: %q", again.Header.Get("Set-Cookie"))
				}
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream calls = %d, want 1", n)
			}
		}},
		{"missing key when required is 400", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store, Defaults: gateway.Policy{RequireKey: true}})
			res := send(t, gw.URL, "POST", "/payments", "", `{"amount":1}`)
			if res.Status != 400 || problemType(t, res) != retrysafe.ProblemMissingKey {
				t.Fatalf("answer = %s", res)
			}
			if n := up.calls.Load(); n != 0 {
				t.Fatalf("upstream calls = %d, want 0", n)
			}
		}},
		{"invalid key is 400", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store})
			for _, key := range []string{strings.Repeat("k", 256), "a,b", `"unterminated`, "tab\there"} {
				res := send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`)
				if res.Status != 400 || problemType(t, res) != retrysafe.ProblemInvalidKey {
					t.Fatalf("key %q: answer = %s", key, res)
				}
			}
			if n := up.calls.Load(); n != 0 {
				t.Fatalf("upstream calls = %d, want 0", n)
			}
		}},
		{"same key other body is 422", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store})
			key := newKey()
			send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`)
			for _, tc := range []struct{ path, body string }{
				{"/payments", `{"amount":2}`},
				{"/other", `{"amount":1}`},
				{"/payments?x=1", `{"amount":1}`},
			} {
				res := send(t, gw.URL, "POST", tc.path, key, tc.body)
				if res.Status != 422 || problemType(t, res) != retrysafe.ProblemMismatch {
					t.Fatalf("%s %s: answer = %s", tc.path, tc.body, res)
				}
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream calls = %d, want 1", n)
			}
		}},
		{"duplicate in flight is 409 then replays", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store})
			key := newKey()
			done := make(chan *result, 1)
			go func() { done <- send(t, gw.URL, "POST", "/slow", key, `{"amount":1}`) }()
			up.waitEntered(t)
			dup := send(t, gw.URL, "POST", "/slow", key, `{"amount":1}`)
			if dup.Status != 409 || problemType(t, dup) != retrysafe.ProblemInProgress || dup.Header.Get("Retry-After") == "" {
				t.Fatalf("duplicate = %s (Retry-After %q)", dup, dup.Header.Get("Retry-After"))
			}
			// Another body while in flight: mismatch is checked first.
			if other := send(t, gw.URL, "POST", "/slow", key, `{"amount":2}`); other.Status != 422 {
				t.Fatalf("other body in flight = %s, want 422", other)
			}
			up.open()
			first := <-done
			if first.Status != 201 {
				t.Fatalf("first = %s", first)
			}
			if again := send(t, gw.URL, "POST", "/slow", key, `{"amount":1}`); !bytes.Equal(again.Body, first.Body) {
				t.Fatalf("retry = %s, want replay of %s", again, first)
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream calls = %d, want 1", n)
			}
		}},
		{"wait mode replays to the duplicate", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store,
				Defaults: gateway.Policy{InFlight: retrysafe.InFlightWait, WaitTimeout: 20 * time.Second}})
			key := newKey()
			results := make(chan *result, 2)
			go func() { results <- send(t, gw.URL, "POST", "/slow", key, `{"amount":1}`) }()
			up.waitEntered(t)
			go func() { results <- send(t, gw.URL, "POST", "/slow", key, `{"amount":1}`) }()
			time.Sleep(100 * time.Millisecond) // let the duplicate start waiting
			up.open()
			a, b := <-results, <-results
			if a.Status != 201 || b.Status != 201 || !bytes.Equal(a.Body, b.Body) {
				t.Fatalf("answers %s and %s, want the same 201", a, b)
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream calls = %d, want 1", n)
			}
		}},
		{"body over the limit is 413", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store, Defaults: gateway.Policy{MaxBody: 64}})
			key := newKey()
			res := send(t, gw.URL, "POST", "/payments", key, `{"memo":"`+strings.Repeat("x", 100)+`"}`)
			if res.Status != 413 || problemType(t, res) != retrysafe.ProblemBodyTooLarge {
				t.Fatalf("answer = %s", res)
			}
			if n := up.calls.Load(); n != 0 {
				t.Fatalf("upstream calls = %d, want 0", n)
			}
			if res := send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`); res.Status != 201 {
				t.Fatalf("retry with a small body = %s (nothing was stored for the key)", res)
			}
		}},
		{"store down is 503 and recovers", func(t *testing.T, store retrysafe.Store) {
			flaky := &flakyStore{Store: store}
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: flaky, StoreTimeout: time.Second})
			key := newKey()
			flaky.down.Store(true)
			res := send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`)
			if res.Status != 503 || problemType(t, res) != retrysafe.ProblemStoreUnavailable || res.Header.Get("Retry-After") == "" {
				t.Fatalf("answer while down = %s", res)
			}
			if ready := send(t, gw.AdminURL, "GET", "/readyz", "", ""); ready.Status != 503 {
				t.Fatalf("/readyz while down = %s", ready)
			}
			if health := send(t, gw.AdminURL, "GET", "/healthz", "", ""); health.Status != 200 {
				t.Fatalf("/healthz while down = %s", health)
			}
			if n := up.calls.Load(); n != 0 {
				t.Fatalf("upstream calls while down = %d, want 0", n)
			}
			flaky.down.Store(false)
			if ready := send(t, gw.AdminURL, "GET", "/readyz", "", ""); ready.Status != 200 {
				t.Fatalf("/readyz after recovery = %s", ready)
			}
			if res := send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`); res.Status != 201 {
				t.Fatalf("after recovery = %s", res)
			}
			if res := send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`); res.Header.Get(retrysafe.HeaderReplayed) != "true" {
				t.Fatalf("replay after recovery = %s", res)
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream calls = %d, want 1", n)
			}
		}},
		{"upstream refused is 502 and releases the key", func(t *testing.T, store retrysafe.Store) {
			addr := freeAddr(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, "http://"+addr), Store: store})
			key := newKey()
			res := send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`)
			if res.Status != 502 || problemType(t, res) != gateway.ProblemUpstreamUnreachable {
				t.Fatalf("answer = %s", res)
			}
			// The upstream comes up on that address: the retry runs.
			up := newUpstreamOn(t, listenOn(t, addr))
			first := send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`)
			if first.Status != 201 || first.Header.Get(retrysafe.HeaderReplayed) != "" {
				t.Fatalf("retry once the upstream is up = %s", first)
			}
			again := send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`)
			if !bytes.Equal(again.Body, first.Body) || again.Header.Get(retrysafe.HeaderReplayed) != "true" {
				t.Fatalf("second retry = %s, want replay", again)
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream calls = %d, want 1", n)
			}
		}},
		{"unknown outcome keeps the key until the lease ends", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			lease := 1500 * time.Millisecond
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store,
				UpstreamTimeout: 500 * time.Millisecond, Defaults: gateway.Policy{Lease: lease}})
			key := newKey()
			start := time.Now()
			res := send(t, gw.URL, "POST", "/hangup", key, `{"amount":1}`)
			if res.Status != 502 || problemType(t, res) != gateway.ProblemOutcomeUnknown || res.Header.Get("Retry-After") == "" {
				t.Fatalf("answer = %s (Retry-After %q)", res, res.Header.Get("Retry-After"))
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream calls = %d, want 1 (net/http must not resend it)", n)
			}
			// Within the lease the key is held.
			if dup := send(t, gw.URL, "POST", "/hangup", key, `{"amount":1}`); dup.Status != 409 {
				if time.Since(start) < lease {
					t.Fatalf("retry within the lease = %s, want 409", dup)
				}
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream calls after an early retry = %d, want 1", n)
			}
			// After the lease (one lease after the last heartbeat), a retry
			// takes the record over and runs again.
			time.Sleep(time.Until(start.Add(lease)))
			eventually(t, 10*time.Second, "the lease to run out", func() bool {
				res = send(t, gw.URL, "POST", "/hangup", key, `{"amount":1}`)
				return res.Status != 409
			})
			if res.Status != 502 || up.calls.Load() != 2 {
				t.Fatalf("retry after the lease = %s, upstream calls %d; want it to run again", res, up.calls.Load())
			}
		}},
		{"upstream timeout is 504 and keeps the key", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store,
				UpstreamTimeout: 300 * time.Millisecond, Defaults: gateway.Policy{Lease: 5 * time.Second}})
			key := newKey()
			res := send(t, gw.URL, "POST", "/sleep/1000", key, `{"amount":1}`)
			if res.Status != 504 || problemType(t, res) != gateway.ProblemOutcomeUnknown {
				t.Fatalf("answer = %s", res)
			}
			if dup := send(t, gw.URL, "POST", "/sleep/1000", key, `{"amount":1}`); dup.Status != 409 {
				t.Fatalf("retry within the lease = %s, want 409", dup)
			}
		}},
		{"client disconnect does not cancel the upstream call", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store})
			key := newKey()
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, err := trySend(ctx, gw.URL, "POST", "/slow", key, `{"amount":1}`)
				errc <- err
			}()
			up.waitEntered(t)
			cancel()
			if err := <-errc; err == nil {
				t.Fatal("the client's request did not fail after it hung up")
			}
			up.open()
			var res *result
			eventually(t, 10*time.Second, "the stored result", func() bool {
				res = send(t, gw.URL, "POST", "/slow", key, `{"amount":1}`)
				return res.Status != 409
			})
			if res.Status != 201 || res.Header.Get(retrysafe.HeaderReplayed) != "true" {
				t.Fatalf("retry = %s, want the stored 201", res)
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream calls = %d, want 1", n)
			}
		}},
		{"response over the storage limit never runs twice", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store, Defaults: gateway.Policy{MaxResponseBody: 1000}})
			key := newKey()
			first := send(t, gw.URL, "POST", "/big/5000", key, `{}`)
			if first.Status != 201 || len(first.Body) != 5000 {
				t.Fatalf("first = %d with %d bytes, want 201 with 5000", first.Status, len(first.Body))
			}
			again := send(t, gw.URL, "POST", "/big/5000", key, `{}`)
			if again.Status != 502 || problemType(t, again) != retrysafe.ProblemResponseNotStored || again.Header.Get(retrysafe.HeaderReplayed) != "true" {
				t.Fatalf("retry = %s", again)
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream calls = %d, want 1", n)
			}
		}},
		{"error responses are stored unless excluded", func(t *testing.T, store retrysafe.Store) {
			up := newUpstream(t)
			set, _ := gateway.ParseStatusSet([]string{"2xx", "4xx"})
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store, Defaults: gateway.Policy{StoreStatuses: set}})
			k409, k500 := newKey(), newKey()
			for range 2 {
				send(t, gw.URL, "POST", "/status/409", k409, `{}`)
				if res := send(t, gw.URL, "POST", "/status/500", k500, `{}`); res.Status != 500 {
					t.Fatalf("500 = %s", res)
				}
			}
			// 409 stored once and replayed; 500 released and run twice.
			if n := up.calls.Load(); n != 3 {
				t.Fatalf("upstream calls = %d, want 3", n)
			}
		}},
	}
}

// TestTwoInstancesOneExecution sends 100 overlapping duplicates to two
// gateways that share one store: the upstream runs exactly once and every
// caller gets its answer.
func TestTwoInstancesOneExecution(t *testing.T) {
	t.Parallel()
	for _, k := range storeKinds() {
		if k.name == "memory" {
			continue // one process only
		}
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			open := k.shared(t)
			up := newUpstream(t)
			// A long lease: 100 waiters polling one single-process dynalite
			// under -race can hold the owner's heartbeat up past half the
			// default lease, and a waiter then sees outcome-unknown.
			policy := gateway.Policy{InFlight: retrysafe.InFlightWait, WaitTimeout: 30 * time.Second, Lease: time.Minute}
			// Under -race the transpiled SQLite driver runs many times slower;
			// a generous store timeout keeps 100 queued claims from timing out.
			storeTimeout := 30 * time.Second
			gws := []*testGateway{
				startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: open(t), Defaults: policy, StoreTimeout: storeTimeout}),
				startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: open(t), Defaults: policy, StoreTimeout: storeTimeout}),
			}
			key := newKey()
			const n = 100
			var (
				wg      sync.WaitGroup
				start   = make(chan struct{})
				results = make([]*result, n)
				errs    = make([]error, n)
			)
			for i := range n {
				wg.Go(func() {
					<-start
					results[i], errs[i] = trySend(context.Background(), gws[i%2].URL, "POST", "/sleep/200", key, `{"amount":42}`)
				})
			}
			close(start)
			wg.Wait()
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				if results[i].Status != 201 || !bytes.Equal(results[i].Body, results[0].Body) {
					t.Fatalf("request %d = %s, want the one 201 %s", i, results[i], results[0])
				}
			}
			if c := up.calls.Load(); c != 1 {
				t.Fatalf("upstream executions = %d, want exactly 1", c)
			}
		})
	}
}

func TestUpstreamTimeoutMustBeShorterThanLease(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	for name, cfg := range map[string]gateway.Config{
		"defaults": {UpstreamTimeout: 30 * time.Second},
		"route": {UpstreamTimeout: 10 * time.Second, Routes: []gateway.Route{
			{Pattern: "POST /payments", Policy: gateway.Policy{Lease: 5 * time.Second}},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg.Upstream = mustURL(t, up.URL)
			cfg.Store = storeKinds()[0].open(t)
			_, err := gateway.New(cfg)
			if err == nil || !strings.Contains(err.Error(), "lease") || !strings.Contains(err.Error(), "upstream timeout") {
				t.Fatalf("New = %v, want an error naming the lease and the upstream timeout", err)
			}
		})
	}
}

func listenOn(t *testing.T, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("listen %s: %v", addr, err)
	return nil
}

// TestNoSilentResend checks that net/http's Transport never sends a keyed
// request twice. It treats a request carrying "Idempotency-Key" as
// replayable and, when a reused keep-alive connection breaks after the
// request was written, sends it again on its own; the gateway forwards the
// key under a lower-case name to prevent that.
func TestNoSilentResend(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: storeKinds()[0].open(t)})
	for _, body := range []string{"", `{"amount":1}`} {
		before := up.calls.Load()
		// Warm up a keep-alive connection to the upstream, so the keyed
		// request goes out on a reused one.
		send(t, gw.URL, "GET", "/items", "", "")
		send(t, gw.URL, "GET", "/items", "", "")
		res := send(t, gw.URL, "POST", "/hangup", newKey(), body)
		if res.Status != 502 {
			t.Fatalf("body %q: answer = %s, want 502", body, res)
		}
		if n := up.calls.Load() - before; n != 1 {
			t.Fatalf("body %q: the upstream received the request %d times, want 1", body, n)
		}
	}
}

// TestTimeoutBeforeConnectingReleases checks that an upstream timeout
// that strikes while the gateway is still connecting counts as "nothing
// sent": no connection, no request. The key is released and a retry runs
// instead of meeting 409.
func TestTimeoutBeforeConnectingReleases(t *testing.T) {
	t.Parallel()
	var dials atomic.Int64
	stuck := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		dials.Add(1)
		<-ctx.Done() // a black-holed SYN: the dial never completes
		return nil, ctx.Err()
	}}
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, "http://192.0.2.1:80"), Store: storeKinds()[0].open(t),
		Transport: stuck, UpstreamTimeout: 200 * time.Millisecond})
	key := newKey()
	for i := range 2 {
		res := send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`)
		if res.Status != 502 || problemType(t, res) != gateway.ProblemUpstreamUnreachable {
			t.Fatalf("attempt %d = %s, want 502 %s", i+1, res, gateway.ProblemUpstreamUnreachable)
		}
	}
	if n := dials.Load(); n != 2 {
		t.Fatalf("dials = %d, want 2 (the retry ran)", n)
	}
}
