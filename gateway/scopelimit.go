package gateway

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/retrysafe/retrysafe"
)

// ProblemScopeLimit is the problem type of a new key refused by a scope
// limit (429, with Retry-After): the caller started more new operations
// than its route allows. Nothing ran and nothing was stored, so a retry
// with the same key after Retry-After runs as new.
const ProblemScopeLimit = "scope-limit"

// ScopeLimits are optional limits on the new keys of one scope (one
// caller), applied by each gateway instance on its own. Only a request
// that claimed a new key counts and can be refused: replays, duplicates
// in flight, mismatches and takeovers of an expired lease never are. A
// refused request is answered 429 problem type [ProblemScopeLimit] with
// Retry-After, and its claim is released. The zero value limits nothing.
type ScopeLimits struct {
	// Rate is the number of new keys per second a scope may start, as a
	// token bucket refilled at this rate; zero means no rate limit.
	Rate float64
	// Burst is the bucket's size: how many new keys a scope may start at
	// once. Zero means Rate rounded up (at least 1).
	Burst int
	// MaxLive bounds the new keys of a scope that this instance admitted
	// within the route's TTL: an approximation of the scope's live records
	// (see docs/gateway.md, "Per-scope limits"). Zero means no bound.
	MaxLive int
}

// enabled reports whether l limits anything.
func (l ScopeLimits) enabled() bool { return l.Rate > 0 || l.MaxLive > 0 }

// burst returns the bucket size in effect.
func (l ScopeLimits) burst() float64 {
	if l.Burst > 0 {
		return float64(l.Burst)
	}
	return max(1, math.Ceil(l.Rate))
}

// validate returns an error naming the first invalid field.
func (l ScopeLimits) validate() error {
	switch {
	case l.Rate < 0 || math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0):
		return fmt.Errorf("scope rate %v is not a positive rate", l.Rate)
	case l.Burst < 0:
		return fmt.Errorf("scope burst %d is negative", l.Burst)
	case l.Burst > 0 && l.Rate == 0:
		return fmt.Errorf("scope burst %d without a scope rate", l.Burst)
	case l.MaxLive < 0:
		return fmt.Errorf("scope max live %d is negative", l.MaxLive)
	}
	return nil
}

// ParseScopeRate parses a rate written as a count per duration: "10/s",
// "600/m", "1000/h", "5/10s". It returns new keys per second.
func ParseScopeRate(s string) (float64, error) {
	bad := fmt.Errorf("%q is not a rate: write a count per unit, like 10/s, 600/m or 1000/h", s)
	count, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, bad
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(count), 64)
	if err != nil || !(n > 0) || math.IsInf(n, 0) {
		return 0, bad
	}
	per = strings.TrimSpace(per)
	if per == "s" || per == "m" || per == "h" {
		per = "1" + per
	}
	d, err := time.ParseDuration(per)
	if err != nil || d <= 0 {
		return 0, bad
	}
	return n / d.Seconds(), nil
}

// maxTrackedScopes bounds the scopes a route's limiter remembers (each
// in a few hundred bytes, whatever the limits). When it is full, it forgets the scopes whose state says nothing (a full
// bucket, no live keys) and, if too few were, arbitrary ones, whose
// limits then start afresh.
const maxTrackedScopes = 100_000

// scopeLimiter applies one route's ScopeLimits to its scopes.
type scopeLimiter struct {
	limits ScopeLimits
	width  time.Duration // of one slot of scopeState.live: ttl/liveSlots
	max    int           // scopes tracked at most

	mu     sync.Mutex
	scopes map[string]*scopeState
}

// liveSlots is the number of time slots a scope's live keys are counted
// in: a key counts for the TTL plus at most one slot (ttl/liveSlots), and
// a scope's state has the same size whatever MaxLive is.
const liveSlots = 64

// scopeState is what a limiter knows of one scope.
type scopeState struct {
	tokens float64   // in the bucket at `at`
	at     time.Time // when tokens was last brought up to date
	// live[k % len(live)] counts the keys admitted in slot k (Unix time /
	// width) for the slots from newest-liveSlots to newest; n is their
	// sum. A key admitted in slot k counts until slot k+liveSlots+1
	// begins, which is after its TTL.
	live   [liveSlots + 1]int32
	newest int64
	n      int
}

func newScopeLimiter(l ScopeLimits, ttl time.Duration) *scopeLimiter {
	return &scopeLimiter{limits: l, width: max(ttl/liveSlots, 1), max: maxTrackedScopes, scopes: make(map[string]*scopeState)}
}

// Limit names, the values of the metric's limit label.
const (
	limitRate = "rate"
	limitLive = "live"
)

// admit decides whether scope may start a new key at now. When it may,
// it takes a token and counts the key live, and returns "" and the slot
// it counted the key in (for unadmit). Otherwise it returns the limit that
// refused it and how long until it could pass.
func (l *scopeLimiter) admit(scope string, now time.Time) (refused string, retryAfter time.Duration, slot int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.scopes[scope]
	if st == nil {
		if len(l.scopes) >= l.max {
			l.makeRoom(now)
		}
		st = &scopeState{tokens: l.limits.burst(), at: now, newest: l.slot(now)}
		l.scopes[scope] = st
	}
	l.update(st, now)
	if l.limits.MaxLive > 0 && st.n >= l.limits.MaxLive {
		// The oldest slot that counts a key: it stops counting when slot
		// oldest+liveSlots+1 begins.
		oldest := st.newest - liveSlots
		for st.live[l.index(oldest)] == 0 {
			oldest++
		}
		return limitLive, time.Unix(0, (oldest+liveSlots+1)*int64(l.width)).Sub(now), 0
	}
	if l.limits.Rate > 0 {
		if st.tokens < 1 {
			return limitRate, time.Duration((1 - st.tokens) / l.limits.Rate * float64(time.Second)), 0
		}
		st.tokens--
	}
	if l.limits.MaxLive > 0 {
		st.live[l.index(st.newest)]++
		st.n++
	}
	return "", 0, st.newest
}

// unadmit stops counting a key admitted for scope in slot that turned out
// not to be stored (nothing ran, the record was released). Its token
// stays spent: the rate counts attempts.
func (l *scopeLimiter) unadmit(scope string, slot int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.scopes[scope]
	if st == nil || l.limits.MaxLive == 0 || slot < st.newest-liveSlots || slot > st.newest {
		return
	}
	if i := l.index(slot); st.live[i] > 0 {
		st.live[i]--
		st.n--
	}
}

func (l *scopeLimiter) slot(now time.Time) int64 { return now.UnixNano() / int64(l.width) }

func (l *scopeLimiter) index(slot int64) int {
	n := int64(len(scopeState{}.live))
	return int((slot%n + n) % n)
}

// update refills st's bucket and drops the keys that no longer count, at
// now.
func (l *scopeLimiter) update(st *scopeState, now time.Time) {
	if l.limits.Rate > 0 && now.After(st.at) {
		st.tokens = min(l.limits.burst(), st.tokens+now.Sub(st.at).Seconds()*l.limits.Rate)
	}
	st.at = now
	cur := l.slot(now)
	// Each slot passed since the newest reuses the place of one that
	// stops counting (all of them after a long pause).
	for k := st.newest + 1; k <= cur && k <= st.newest+liveSlots+1; k++ {
		i := l.index(k)
		st.n -= int(st.live[i])
		st.live[i] = 0
	}
	st.newest = max(st.newest, cur)
}

// makeRoom forgets idle scopes and, if that freed less than an eighth of
// the map, arbitrary ones until it has (so that a flood of new scopes
// pays for the scan once per eighth, not once per scope).
func (l *scopeLimiter) makeRoom(now time.Time) {
	for scope, st := range l.scopes {
		l.update(st, now)
		if st.n == 0 && (l.limits.Rate == 0 || st.tokens >= l.limits.burst()) {
			delete(l.scopes, scope)
		}
	}
	for scope := range l.scopes { // map order: no caller can choose whom
		if len(l.scopes) <= l.max-max(1, l.max/8) {
			break
		}
		delete(l.scopes, scope)
	}
}

// tracked returns the number of scopes the limiter remembers.
func (l *scopeLimiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.scopes)
}

// newScopeLimitMetric registers the counter of refusals.
func newScopeLimitMetric(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricPrefix + "scope_limited_total",
		Help: "New keys refused by a per-scope limit (429 scope-limit), by route and limit (rate or live).",
	}, []string{"route", "limit"})
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return c, nil
}

// routeLabel is the route label of a route's metrics: its pattern, or
// "default" for the requests that match no route.
func routeLabel(pattern string) string {
	if pattern == "" {
		return "default"
	}
	return pattern
}

// limitScope applies rh's scope limits to the operation op (a claimed
// record about to be forwarded). It returns false after answering 429 and
// releasing the claim. After the upstream call, call done: it stops
// counting a key that was released.
func (g *Gateway) limitScope(w http.ResponseWriter, rh *routeHandler, op *retrysafe.Operation) (ok bool, done func()) {
	if rh == nil || rh.limiter == nil || op == nil || op.Attempt() != 1 {
		return true, func() {}
	}
	scope := op.Scope()
	refused, wait, slot := rh.limiter.admit(scope, g.cfg.Now())
	if refused == "" {
		return true, func() {
			if op.Disposition() == retrysafe.DispositionRelease {
				rh.limiter.unadmit(scope, slot)
			}
		}
	}
	op.Release()
	g.scopeLimited.WithLabelValues(routeLabel(rh.pattern), refused).Inc()
	detail := "This caller started new operations faster than this route allows. Nothing was processed; retry with the same Idempotency-Key after Retry-After."
	if refused == limitLive {
		detail = "This caller has as many live operations on this route as it may hold. Nothing was processed; retry with the same Idempotency-Key after Retry-After."
	}
	retrysafe.WriteProblem(w, &retrysafe.Problem{
		Type:   g.problemBase + ProblemScopeLimit,
		Title:  "Too many new operations for this caller",
		Status: http.StatusTooManyRequests,
		Detail: detail,
	}, max(wait, time.Second))
	return false, nil
}
