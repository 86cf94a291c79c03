package gateway

import (
	"fmt"
	"math"
	"testing"
	"time"
)

var limitBase = time.Date(2031, 1, 2, 3, 4, 0, 0, time.UTC) // on a whole minute

func TestParseScopeRate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{
		"10/s": 10, "600/m": 10, "3600/h": 1, "5/10s": 0.5, " 2 / s ": 2, "1.5/s": 1.5, "1/500ms": 2,
	} {
		got, err := ParseScopeRate(in)
		if err != nil || math.Abs(got-want) > 1e-9 {
			t.Errorf("ParseScopeRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "10", "10/", "/s", "0/s", "-1/s", "x/s", "10/x", "10/0s", "10/-1s", "Inf/s", "NaN/s"} {
		if got, err := ParseScopeRate(in); err == nil {
			t.Errorf("ParseScopeRate(%q) = %v, want an error", in, got)
		}
	}
}

// TestScopeRate: the bucket lets Burst new keys through at once, then
// one per 1/Rate; the refusal says how long until the next token; scopes
// have buckets of their own.
func TestScopeRate(t *testing.T) {
	t.Parallel()
	l := newScopeLimiter(ScopeLimits{Rate: 2, Burst: 3}, time.Hour)
	for n := range 3 {
		if refused, _, _ := l.admit("a", limitBase); refused != "" {
			t.Fatalf("key %d of the burst refused by %s", n, refused)
		}
	}
	refused, wait, _ := l.admit("a", limitBase)
	if refused != limitRate || wait != 500*time.Millisecond {
		t.Fatalf("fourth key at once: %q, wait %s; want refused by rate, 500ms", refused, wait)
	}
	if refused, _, _ := l.admit("b", limitBase); refused != "" {
		t.Fatalf("another scope refused by %s", refused)
	}
	if refused, _, _ := l.admit("a", limitBase.Add(499*time.Millisecond)); refused != limitRate {
		t.Fatalf("1ms before the next token: %q, want refused", refused)
	}
	if refused, _, _ := l.admit("a", limitBase.Add(999*time.Millisecond)); refused != "" {
		t.Fatalf("after the next token: refused by %s", refused)
	}
	// A long pause refills to the burst, not beyond.
	later := limitBase.Add(time.Hour)
	for n := range 3 {
		if refused, _, _ := l.admit("a", later); refused != "" {
			t.Fatalf("key %d after the pause refused by %s", n, refused)
		}
	}
	if refused, _, _ := l.admit("a", later); refused != limitRate {
		t.Fatalf("the bucket held more than its burst after a pause: %q", refused)
	}
}

// TestScopeDefaultBurst: without Burst, the bucket holds the rate per
// second rounded up, and at least one key.
func TestScopeDefaultBurst(t *testing.T) {
	t.Parallel()
	for rate, want := range map[float64]int{10: 10, 2.5: 3, 0.1: 1} {
		l := newScopeLimiter(ScopeLimits{Rate: rate}, time.Hour)
		n := 0
		for ; n < 100; n++ {
			if refused, _, _ := l.admit("a", limitBase); refused != "" {
				break
			}
		}
		if n != want {
			t.Errorf("rate %v: %d keys at once, want %d", rate, n, want)
		}
	}
}

// TestScopeMaxLive: at most MaxLive keys count; a key counts for the
// TTL and at most one slot (TTL/64) more, never less; the refusal says
// when the oldest stops counting; a released key (unadmit) stops at once.
func TestScopeMaxLive(t *testing.T) {
	t.Parallel()
	l := newScopeLimiter(ScopeLimits{MaxLive: 2}, 64*time.Minute) // slots of one minute
	if refused, _, _ := l.admit("a", limitBase.Add(30*time.Second)); refused != "" {
		t.Fatal(refused)
	}
	if refused, _, _ := l.admit("a", limitBase.Add(10*time.Minute)); refused != "" {
		t.Fatal(refused)
	}
	refused, wait, _ := l.admit("a", limitBase.Add(20*time.Minute))
	if refused != limitLive || wait != 45*time.Minute {
		t.Fatalf("third live key: %q, wait %s; want refused by live, 45m (the oldest slot's end: 64m + one slot)", refused, wait)
	}
	if refused, _, _ := l.admit("b", limitBase.Add(20*time.Minute)); refused != "" {
		t.Fatalf("another scope refused by %s", refused)
	}
	// The first key's TTL has passed, but not its slot's end.
	if refused, _, _ := l.admit("a", limitBase.Add(64*time.Minute+30*time.Second)); refused != limitLive {
		t.Fatalf("at the TTL of the first key: %q, want still refused (a key counts at least its TTL)", refused)
	}
	refused, _, slot := l.admit("a", limitBase.Add(65*time.Minute))
	if refused != "" {
		t.Fatalf("once the oldest key's slot ended: refused by %s", refused)
	}
	l.unadmit("a", slot)
	if refused, _, _ := l.admit("a", limitBase.Add(65*time.Minute)); refused != "" {
		t.Fatalf("after a released key stopped counting: refused by %s", refused)
	}
	if refused, _, _ := l.admit("a", limitBase.Add(65*time.Minute)); refused != limitLive {
		t.Fatalf("a third live key again: %q, want refused", refused)
	}
	// After a pause longer than the TTL nothing counts.
	for n := range 2 {
		if refused, _, _ := l.admit("a", limitBase.Add(1000*time.Hour)); refused != "" {
			t.Fatalf("key %d after a long pause refused by %s", n, refused)
		}
	}
}

// TestScopeLimiterBounded: the limiter remembers at most max scopes,
// however many callers come at once.
func TestScopeLimiterBounded(t *testing.T) {
	t.Parallel()
	l := newScopeLimiter(ScopeLimits{Rate: 1, MaxLive: 3}, time.Hour)
	l.max = 64
	for n := range 10_000 {
		l.admit(fmt.Sprint("once-", n), limitBase) // none idle: each holds a live key
		if got := l.tracked(); got > l.max {
			t.Fatalf("after %d scopes the limiter tracks %d, more than %d", n+1, got, l.max)
		}
	}
}

// TestScopeLimiterForgetsIdleFirst: when the limiter is full, it forgets
// the scopes whose state says nothing (bucket full again, no live key),
// and keeps a scope that still has live keys.
func TestScopeLimiterForgetsIdleFirst(t *testing.T) {
	t.Parallel()
	l := newScopeLimiter(ScopeLimits{Rate: 1, MaxLive: 3}, time.Minute)
	l.max = 64
	l.admit("busy", limitBase.Add(2*time.Minute)) // live until +3m
	for n := range l.max - 1 {
		l.admit(fmt.Sprint("old-", n), limitBase) // live until +1m: idle by +2m
	}
	if got := l.tracked(); got != l.max {
		t.Fatalf("tracked %d, want %d", got, l.max)
	}
	l.admit("new", limitBase.Add(2*time.Minute))
	l.mu.Lock()
	_, busy := l.scopes["busy"]
	l.mu.Unlock()
	if !busy || l.tracked() != 2 {
		t.Fatalf("after making room: busy kept %v, %d scopes tracked; want busy kept and only busy and new left", busy, l.tracked())
	}
	// The busy scope's count survived: two more fit, a third does not.
	for n := range 2 {
		if refused, _, _ := l.admit("busy", limitBase.Add(2*time.Minute+time.Duration(n+1)*time.Second)); refused != "" {
			t.Fatalf("busy key %d refused by %s", n, refused)
		}
	}
	if refused, _, _ := l.admit("busy", limitBase.Add(2*time.Minute+5*time.Second)); refused != limitLive {
		t.Fatalf("busy's fourth live key: %q, want refused by live (its count was kept)", refused)
	}
}

func TestScopeLimitsValidate(t *testing.T) {
	t.Parallel()
	for _, bad := range []ScopeLimits{{Rate: -1}, {Rate: math.NaN()}, {Rate: math.Inf(1)}, {Rate: 1, Burst: -1}, {Burst: 5}, {MaxLive: -1}} {
		if err := bad.validate(); err == nil {
			t.Errorf("%+v: valid, want an error", bad)
		}
	}
	for _, good := range []ScopeLimits{{}, {Rate: 1}, {Rate: 1, Burst: 5}, {MaxLive: 10}} {
		if err := good.validate(); err != nil {
			t.Errorf("%+v: %v", good, err)
		}
	}
}
