package gateway_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/store/memory"
)

// limitClock is a clock the test moves by hand.
type limitClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *limitClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *limitClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestScopeRateLimit: a scope that starts new keys faster than its rate
// gets 429 scope-limit with Retry-After, and nothing reaches the
// upstream; another scope is unaffected; a replay of the limited scope's
// completed key is never refused; the refused key, retried once a token
// is back, runs as new (its claim was released); the refusal is counted.
func TestScopeRateLimit(t *testing.T) {
	t.Parallel()
	clock := &limitClock{now: time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)}
	store := memory.New(memory.Config{JanitorInterval: -1})
	t.Cleanup(func() { store.Close() })
	up := newUpstream(t)
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store, Now: clock.Now,
		Defaults: gateway.Policy{ScopeLimits: gateway.ScopeLimits{Rate: 1, Burst: 2}}})
	alice, bob := []string{"Authorization", "Bearer alice"}, []string{"Authorization", "Bearer bob"}

	first, second, third := newKey(), newKey(), newKey()
	for _, key := range []string{first, second} {
		if res := send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`, alice...); res.Status != 201 {
			t.Fatalf("alice's key within the burst = %s, want 201", res)
		}
	}
	res := send(t, gw.URL, "POST", "/payments", third, `{"amount":1}`, alice...)
	if res.Status != 429 || problemType(t, res) != gateway.ProblemScopeLimit || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("alice's third key at once = %s (Retry-After %q), want 429 %s with Retry-After 1", res, res.Header.Get("Retry-After"), gateway.ProblemScopeLimit)
	}
	if n := up.calls.Load(); n != 2 {
		t.Fatalf("upstream ran %d times, want 2 (the refused key must not run)", n)
	}
	if res := send(t, gw.URL, "POST", "/payments", newKey(), `{"amount":1}`, bob...); res.Status != 201 {
		t.Fatalf("bob's first key while alice is limited = %s, want 201", res)
	}
	for range 3 {
		res := send(t, gw.URL, "POST", "/payments", first, `{"amount":1}`, alice...)
		if res.Status != 201 || res.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("alice's replay while she is limited = %s (replayed %q), want the stored 201", res, res.Header.Get("Idempotent-Replayed"))
		}
	}
	clock.add(time.Second)
	if res := send(t, gw.URL, "POST", "/payments", third, `{"amount":1}`, alice...); res.Status != 201 || res.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("alice's refused key retried after Retry-After = %s, want a new 201", res)
	}
	if n := up.calls.Load(); n != 4 {
		t.Fatalf("upstream ran %d times, want 4", n)
	}
	text := string(send(t, gw.AdminURL, "GET", "/metrics", "", "").Body)
	if got := metricValue(t, text, `retrysafe_scope_limited_total{limit="rate",route="default"}`); got != 1 {
		t.Fatalf("retrysafe_scope_limited_total{rate,default} = %v, want 1", got)
	}
}

// TestScopeMaxLiveRoute: a route's scope_max_live bounds the new keys a
// scope started within the route's TTL, on that route only.
func TestScopeMaxLiveRoute(t *testing.T) {
	t.Parallel()
	clock := &limitClock{now: time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)}
	store := memory.New(memory.Config{JanitorInterval: -1})
	t.Cleanup(func() { store.Close() })
	up := newUpstream(t)
	routes, err := gateway.ParseConfig([]byte(`
routes:
  - match: "POST /payments"
    ttl: 1h
    scope_max_live: 2
`), gateway.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store, Now: clock.Now, Routes: routes})
	alice := []string{"Authorization", "Bearer alice"}
	for range 2 {
		if res := send(t, gw.URL, "POST", "/payments", newKey(), `{}`, alice...); res.Status != 201 {
			t.Fatalf("a key within the bound = %s", res)
		}
	}
	res := send(t, gw.URL, "POST", "/payments", newKey(), `{}`, alice...)
	// A key counts for the TTL and at most one slot (TTL/64) more.
	if retry, _ := strconv.Atoi(res.Header.Get("Retry-After")); res.Status != 429 || problemType(t, res) != gateway.ProblemScopeLimit || retry < 3600 || retry > 3600+57 {
		t.Fatalf("a third live key = %s (Retry-After %q), want 429 %s, Retry-After the TTL (3600) plus at most 57", res, res.Header.Get("Retry-After"), gateway.ProblemScopeLimit)
	}
	// Another route (the defaults, no limits) still serves alice.
	if res := send(t, gw.URL, "POST", "/other", newKey(), `{}`, alice...); res.Status != 201 {
		t.Fatalf("alice on a route without limits = %s", res)
	}
	clock.add(time.Hour + time.Minute)
	if res := send(t, gw.URL, "POST", "/payments", newKey(), `{}`, alice...); res.Status != 201 {
		t.Fatalf("once the first keys' TTL passed = %s, want 201", res)
	}
	// (metricValue cannot read a series whose label holds a space.)
	text := string(send(t, gw.AdminURL, "GET", "/metrics", "", "").Body)
	if want := "\n" + `retrysafe_scope_limited_total{limit="live",route="POST /payments"} 1` + "\n"; !strings.Contains(text, want) {
		t.Fatalf("/metrics lacks %q", strings.TrimSpace(want))
	}
}

// TestScopeMaxLiveReleased: a key whose claim was released because
// nothing reached the upstream (502 upstream-unreachable) stops counting
// toward scope_max_live, so the caller's retries are not refused.
func TestScopeMaxLiveReleased(t *testing.T) {
	t.Parallel()
	store := memory.New(memory.Config{JanitorInterval: -1})
	t.Cleanup(func() { store.Close() })
	down := mustURL(t, "http://"+freeAddr(t)) // nobody listens
	gw := startGateway(t, gateway.Config{Upstream: down, Store: store,
		Defaults: gateway.Policy{ScopeLimits: gateway.ScopeLimits{MaxLive: 1}}})
	for n := range 3 {
		res := send(t, gw.URL, "POST", "/payments", newKey(), `{}`, "Authorization", "Bearer alice")
		if res.Status != 502 || problemType(t, res) != gateway.ProblemUpstreamUnreachable {
			t.Fatalf("request %d to a dead upstream = %s, want 502 %s (a released key must not count)", n, res, gateway.ProblemUpstreamUnreachable)
		}
	}
}

// TestScopeLimitsConfig: a route's scope_rate, scope_burst and
// scope_max_live override the defaults ("off" turns the rate off), and a
// bad value is an error naming the route and the field.
func TestScopeLimitsConfig(t *testing.T) {
	t.Parallel()
	defaults := gateway.DefaultPolicy()
	defaults.ScopeLimits = gateway.ScopeLimits{Rate: 5, Burst: 10, MaxLive: 100}
	routes, err := gateway.ParseConfig([]byte(`
routes:
  - match: "POST /a"
    scope_rate: 600/m
    scope_burst: 3
  - match: "POST /b"
    scope_rate: "off"
    scope_max_live: 0
  - match: "POST /c"
`), defaults)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []gateway.ScopeLimits{{Rate: 10, Burst: 3, MaxLive: 100}, {}, defaults.ScopeLimits} {
		if got := routes[i].Policy.ScopeLimits; got != want {
			t.Errorf("%s: %+v, want %+v", routes[i].Pattern, got, want)
		}
	}
	for yaml, want := range map[string]string{
		"scope_rate: fast":                        `"POST /x"): scope_rate: "fast" is not a rate`,
		"scope_rate: \"off\"\n    scope_burst: 2": `"POST /x"): scope_burst: set without a scope_rate`,
		"scope_burst: -1":                         `"POST /x"): scope_burst: -1 is negative`,
		"scope_max_live: -5":                      `"POST /x"): scope_max_live: -5 is negative`,
	} {
		_, err := gateway.ParseConfig([]byte("routes:\n  - match: \"POST /x\"\n    "+yaml+"\n"), defaults)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error containing %q", yaml, err, want)
		}
	}
}
