package torture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"time"
)

// Anomaly kinds: each is a broken promise.
const (
	AnomalyDuplicate        = "duplicate-effect"  // a second effect for a key that no injected fault explains
	AnomalyUnkeyed          = "unkeyed-effect"    // the upstream got a keyed client request without its key
	AnomalyMismatchRan      = "mismatch-ran"      // an effect with another fingerprint than the key's first
	AnomalyMismatchAnswered = "mismatch-answered" // a request with another fingerprint got more than 422
	AnomalySpurious422      = "spurious-422"      // a request with the key's own fingerprint got 422
	AnomalyCrossTenant      = "cross-tenant"      // an answer made for another tenant or key
	AnomalyWrongAnswer      = "wrong-answer"      // an answer made for another request body
	AnomalyAnswerDiffers    = "answer-differs"    // a first answer differs from what the upstream sent
	AnomalyReplayDiffers    = "replay-differs"    // a replay differs from the stored answer
	AnomalyPhantom          = "phantom-answer"    // an answer naming an effect the upstream never had
	AnomalyUnexpectedStatus = "unexpected-status" // an answer neither from the upstream nor a documented gateway problem
	AnomalyLinearizability  = "not-linearizable"  // store-level: porcupine rejected a history
	AnomalyStoreError       = "store-error"       // store-level: an operation failed
)

// explaining says which faults can explain a second effect: the window
// between the upstream acting and the result being stored is open when the
// gateway dies (SIGKILL), its link to the upstream breaks or stalls
// (outcome unknown: the key stays locked until the lease runs out), its
// link to the store breaks (completion fails, or the lease is not renewed),
// or the upstream answers after the gateway stopped waiting. SIGTERM and
// faults between client and gateway never explain one: a graceful stop
// finishes in-flight work, and a client hang-up does not cancel the
// operation.
func explaining(f *Fault) bool {
	switch f.Link {
	case LinkUpstream, LinkStore:
		return true
	case LinkProcess:
		return f.Kind == FaultKill
	case LinkService:
		return f.Kind == FaultSlow
	case LinkReported:
		return true
	}
	return false
}

// CheckOptions tune [Check].
type CheckOptions struct {
	// Before is how long before an effect started a fault may have begun
	// and still explain a duplicate (a request in flight when its gateway
	// died). Default 1s.
	Before time.Duration
	// After is how long after an effect ended its gateway may still have
	// been storing the result (store calls with their timeout and retries).
	// Default 10s.
	After time.Duration
}

// Anomaly is one broken promise.
type Anomaly struct {
	Kind     string  `json:"kind"`
	Tenant   string  `json:"tenant"`
	Key      string  `json:"key"`
	Requests []int64 `json:"requests,omitempty"`
	Effects  []int64 `json:"effects,omitempty"`
	Detail   string  `json:"detail"`
}

// Documented is a second effect for a key inside the documented window,
// with the fault that opened it.
type Documented struct {
	Tenant    string `json:"tenant"`
	Key       string `json:"key"`
	First     int64  `json:"first"`     // the effect whose result was not stored
	Duplicate int64  `json:"duplicate"` // the effect that ran again
	Fault     Fault  `json:"fault"`
}

// Result is the verdict on a history.
type Result struct {
	Requests   int            `json:"requests"`
	Effects    int            `json:"effects"`
	Keys       int            `json:"keys"`
	Outcomes   map[string]int `json:"outcomes"` // answers by kind: new, replayed, 409, 422, 5xx, error
	Anomalies  []Anomaly      `json:"anomalies"`
	Documented []Documented   `json:"documented"`
}

// AnomaliesByKind counts the anomalies of each kind.
func (r *Result) AnomaliesByKind() map[string]int {
	m := map[string]int{}
	for _, a := range r.Anomalies {
		m[a.Kind]++
	}
	return m
}

// answer is the body the counting upstream sends.
type answer struct {
	Effect int64  `json:"effect"`
	Tenant string `json:"tenant"`
	Key    string `json:"key"`
	Op     string `json:"op"`
}

// parseAnswer reads an upstream answer from a response body; ok is false
// for any other body (a gateway problem, say).
func parseAnswer(body []byte) (answer, bool) {
	var a answer
	if !bytes.HasPrefix(body, []byte(`{"effect":`)) || json.Unmarshal(body, &a) != nil || a.Effect == 0 {
		return answer{}, false
	}
	return a, true
}

type tenantKey struct{ tenant, key string }

// Check judges a history against the promise. It never stops at the first
// anomaly: the result lists them all.
func Check(h *History, opt CheckOptions) *Result {
	if opt.Before == 0 {
		opt.Before = time.Second
	}
	if opt.After == 0 {
		opt.After = 10 * time.Second
	}
	res := &Result{Requests: len(h.Requests), Effects: len(h.Effects), Outcomes: map[string]int{}}
	bad := func(kind string, tk tenantKey, reqs, effs []int64, format string, args ...any) {
		res.Anomalies = append(res.Anomalies, Anomaly{Kind: kind, Tenant: tk.tenant, Key: tk.key, Requests: reqs, Effects: effs, Detail: fmt.Sprintf(format, args...)})
	}

	effects := map[tenantKey][]*Effect{}
	bySeq := map[int64]*Effect{}
	for i := range h.Effects {
		e := &h.Effects[i]
		tk := tenantKey{e.Tenant, e.Key}
		effects[tk] = append(effects[tk], e)
		bySeq[e.Seq] = e
	}
	requests := map[tenantKey][]*Request{}
	for i := range h.Requests {
		q := &h.Requests[i]
		tk := tenantKey{q.Tenant, q.Key}
		requests[tk] = append(requests[tk], q)
	}
	keys := map[tenantKey]bool{}
	for tk := range effects {
		keys[tk] = true
	}
	for tk := range requests {
		keys[tk] = true
	}
	res.Keys = len(keys)

	for _, tk := range sortedKeys(keys) {
		effs := effects[tk]
		reqs := requests[tk]
		sort.Slice(effs, func(i, j int) bool { return effs[i].Start.Before(effs[j].Start) })
		sort.Slice(reqs, func(i, j int) bool { return reqs[i].Start.Before(reqs[j].Start) })

		if tk.key == "" {
			for _, e := range effs {
				bad(AnomalyUnkeyed, tk, nil, []int64{e.Seq}, "the upstream got op %q of tenant %q without an Idempotency-Key", e.Op, e.Tenant)
			}
			continue
		}
		// The key's fingerprint is that of its first effect, or of its
		// first request when nothing ran.
		op := ""
		switch {
		case len(effs) > 0:
			op = effs[0].Op
		case len(reqs) > 0:
			op = reqs[0].Op
		}

		for j, e := range effs {
			if e.Op != op {
				bad(AnomalyMismatchRan, tk, nil, []int64{effs[0].Seq, e.Seq}, "effect %d ran op %q, but the key belongs to op %q", e.Seq, e.Op, op)
			}
			if j == 0 {
				continue
			}
			if d, ok := explain(h.Faults, effs[:j], e, opt); ok {
				res.Documented = append(res.Documented, d)
				continue
			}
			bad(AnomalyDuplicate, tk, nil, []int64{effs[0].Seq, e.Seq},
				"effect %d (gateway %d, %s) repeats effect %d (gateway %d, %s) and no injected fault explains it",
				e.Seq, e.Gateway, e.Start.Format(time.StampMilli), effs[j-1].Seq, effs[j-1].Gateway, effs[j-1].Start.Format(time.StampMilli))
		}

		var firstReplay *Request
		for _, q := range reqs {
			res.Outcomes[outcome(q)]++
			mismatch := q.Op != op
			if q.Err != "" {
				continue // no answer: allowed for any request under faults
			}
			a, fromUpstream := parseAnswer(q.Body)
			if mismatch {
				if fromUpstream || (q.Status != http.StatusUnprocessableEntity && q.Status != http.StatusServiceUnavailable) {
					bad(AnomalyMismatchAnswered, tk, []int64{q.ID}, nil, "request %d reused the key of op %q with op %q and got %d (replayed %v), not 422", q.ID, op, q.Op, q.Status, q.Replayed)
				}
				continue
			}
			if q.Status == http.StatusUnprocessableEntity && !fromUpstream {
				bad(AnomalySpurious422, tk, []int64{q.ID}, nil, "request %d with the key's own op %q got 422", q.ID, op)
				continue
			}
			if q.Replayed {
				if firstReplay == nil {
					firstReplay = q
				} else if diff := sameAnswer(firstReplay.Status, firstReplay.Header, firstReplay.Body, q.Status, q.Header, q.Body); diff != "" {
					bad(AnomalyReplayDiffers, tk, []int64{firstReplay.ID, q.ID}, nil, "replays of requests %d and %d differ: %s", firstReplay.ID, q.ID, diff)
				}
			}
			if !fromUpstream {
				if !gatewayProblem(q) {
					bad(AnomalyUnexpectedStatus, tk, []int64{q.ID}, nil, "request %d got %d (%s) %.120q: neither the upstream's answer nor a documented gateway problem", q.ID, q.Status, q.Header["Content-Type"], q.Body)
				}
				continue
			}
			if a.Tenant != q.Tenant || a.Key != q.Key {
				bad(AnomalyCrossTenant, tk, []int64{q.ID}, []int64{a.Effect}, "request %d of tenant %q key %q got the answer made for tenant %q key %q", q.ID, q.Tenant, q.Key, a.Tenant, a.Key)
				continue
			}
			if a.Op != q.Op {
				bad(AnomalyWrongAnswer, tk, []int64{q.ID}, []int64{a.Effect}, "request %d (op %q) got the answer of op %q", q.ID, q.Op, a.Op)
				continue
			}
			e := bySeq[a.Effect]
			if e == nil {
				bad(AnomalyPhantom, tk, []int64{q.ID}, []int64{a.Effect}, "request %d got an answer naming effect %d, which the upstream never recorded", q.ID, a.Effect)
				continue
			}
			if diff := sameAnswer(e.Status, e.Header, e.Body, q.Status, q.Header, q.Body); diff != "" {
				kind := AnomalyAnswerDiffers
				if q.Replayed {
					kind = AnomalyReplayDiffers
				}
				bad(kind, tk, []int64{q.ID}, []int64{e.Seq}, "request %d (replayed %v) differs from the upstream's answer of effect %d: %s", q.ID, q.Replayed, e.Seq, diff)
			}
		}
	}
	return res
}

// explain finds a fault that opened the documented window for a later
// effect: one that hit the gateway of an earlier effect while that effect's
// result was being produced or stored.
//
// An injected fault is preferred; failing one, a problem the gateway
// itself reported (LinkReported) explains the repeat.
func explain(faults []Fault, earlier []*Effect, dup *Effect, opt CheckOptions) (Documented, bool) {
	for _, reported := range []bool{false, true} {
		if d, ok := explainBy(faults, earlier, dup, opt, reported); ok {
			return d, true
		}
	}
	return Documented{}, false
}

func explainBy(faults []Fault, earlier []*Effect, dup *Effect, opt CheckOptions, reported bool) (Documented, bool) {
	for i := len(earlier) - 1; i >= 0; i-- {
		e := earlier[i]
		for k := range faults {
			f := &faults[k]
			if (f.Link == LinkReported) != reported || !explaining(f) || (f.Gateway != -1 && f.Gateway != e.Gateway) || (f.Effect != 0 && f.Effect != e.Seq) {
				continue
			}
			end := f.End
			if end.IsZero() {
				end = time.Unix(1<<40, 0)
			}
			if f.Start.After(e.End.Add(opt.After)) || end.Before(e.Start.Add(-opt.Before)) {
				continue
			}
			return Documented{Tenant: dup.Tenant, Key: dup.Key, First: e.Seq, Duplicate: dup.Seq, Fault: *f}, true
		}
	}
	return Documented{}, false
}

// gatewayProblem reports whether q's answer is one the gateway documents
// for a request it could not finish: 409 in progress, 502/504 upstream
// unreachable or outcome unknown (or a stored "response not stored"), 503
// store unavailable; all as problem+json.
func gatewayProblem(q *Request) bool {
	switch q.Status {
	case http.StatusConflict, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return q.Header["Content-Type"] == "application/problem+json"
	}
	return false
}

// sameAnswer compares two answers byte for byte: status, compared headers
// and body. It returns "" when they are identical.
func sameAnswer(s1 int, h1 map[string]string, b1 []byte, s2 int, h2 map[string]string, b2 []byte) string {
	if s1 != s2 {
		return fmt.Sprintf("status %d vs %d", s1, s2)
	}
	for _, name := range ComparedHeaders {
		if h1[name] != h2[name] {
			return fmt.Sprintf("header %s %q vs %q", name, h1[name], h2[name])
		}
	}
	if !bytes.Equal(b1, b2) {
		return fmt.Sprintf("body %.80q vs %.80q", b1, b2)
	}
	return ""
}

// outcome classifies an answer for the report.
func outcome(q *Request) string {
	switch {
	case q.Err != "":
		return "error"
	case q.Replayed:
		return "replayed"
	case q.Status == http.StatusConflict || q.Status == http.StatusUnprocessableEntity:
		return fmt.Sprint(q.Status)
	case q.Header["Content-Type"] == "application/problem+json":
		return fmt.Sprintf("gateway %d", q.Status)
	default:
		return fmt.Sprintf("upstream %dxx", q.Status/100)
	}
}

func sortedKeys(m map[tenantKey]bool) []tenantKey {
	keys := slices.Collect(maps.Keys(m))
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].tenant != keys[j].tenant {
			return keys[i].tenant < keys[j].tenant
		}
		return keys[i].key < keys[j].key
	})
	return keys
}
