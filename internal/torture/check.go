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
	AnomalyDuplicate        = "duplicate-effect"  // a second effect for a key that no injected event of the attempt it repeats explains
	AnomalyEarlyRepeat      = "early-repeat"      // a second effect sooner than a lease after the request of the attempt it repeats
	AnomalyResolvedRepeat   = "resolved-repeat"   // resolve mode: a second effect for a key, whatever the cause
	AnomalyUnresolved       = "unresolved"        // resolve mode: a record still processing after the run settled
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

// Causes of a repeat. Each is one injected event of the attempt whose
// result was not stored (the effect repeated), matched by gateway, key,
// request and connection, never a fault somewhere nearby.
const (
	// CauseKill: the effect's gateway got SIGKILL while that key was in
	// flight there (after its request began, before the client had the
	// answer or, without one, before the gateway's upstream timeout and
	// completion could have ended).
	CauseKill = "kill"
	// CauseUpstreamCut: a fault on the effect's gateway's upstream link
	// was active when that request's own upstream connection ended, after
	// the request arrived and before its exchange could have ended.
	CauseUpstreamCut = "upstream-cut"
	// CauseSlowAnswer: the upstream answered that very effect later than
	// the gateway waits (an injected slow answer).
	CauseSlowAnswer = "slow-answer"
	// CauseLeaseLost: a fault on the effect's gateway's store link while
	// that key was in flight there: the lease was lost, or the result
	// could not be stored.
	CauseLeaseLost = "lease-lost"
	// CauseGatewayGaveUp is the one cause that is no injected event: the
	// gateway closed that request's own upstream connection before the
	// answer, with no fault on the link (its upstream timeout fired on a
	// loaded machine). It is still specific to the request; the report
	// counts it apart.
	CauseGatewayGaveUp = "gateway-gave-up"
)

// cutGrace is how long after a fault was lifted a connection it cut may
// be seen to close (Toxiproxy tears the two sides down one after the
// other), and how long after the exchange's bound a connection the gateway
// closed may be seen to end.
const cutGrace = 250 * time.Millisecond

// CheckOptions tune [Check].
type CheckOptions struct {
	// Lease is the gateways' lease: no repeat may start sooner than this
	// after the request of the attempt it repeats (a takeover waits for
	// the lease to run out). Default 3s.
	Lease time.Duration
	// UpstreamTimeout and StoreTimeout are the gateways' timeouts: they
	// bound how long a key can be in flight at a gateway after its
	// request reached the upstream (the exchange, then the completion's
	// two store calls). Default 1s each.
	UpstreamTimeout, StoreTimeout time.Duration
	// Resolve judges a resolve-mode run: no repeat is allowed at all,
	// and no record may be left processing.
	Resolve bool
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

// Repeat is a second effect for a key, with the one injected event of
// the attempt it repeats that explains it.
type Repeat struct {
	Tenant    string `json:"tenant"`
	Key       string `json:"key"`
	First     int64  `json:"first"`  // the effect whose result was not stored
	Repeat    int64  `json:"repeat"` // the effect that ran again
	Attempts  [2]int `json:"attempts"`
	Gateway   int    `json:"gateway"` // the first effect's gateway
	Cause     string `json:"cause"`   // a Cause constant
	Fault     *Fault `json:"fault,omitempty"`
	Detail    string `json:"detail"`
	GapMillis int64  `json:"gap_ms"` // from the first effect's request to the repeat
}

// Unknowns counts, in a resolve-mode run, the attempts whose outcome was
// unknown (the resolve URL was asked about them, or they were left
// stranded) by what resolved them: the resolve call of a retry that found
// the operation done (Resolver: the answer stored and replayed) or not
// done (Retry: the retry ran it), the completer, or none of these (Owner:
// no call decided; the attempt's own gateway finished after all, or a
// later decision settled the key). Unresolved ones are anomalies.
type Unknowns struct {
	Total     int `json:"total"`
	Resolver  int `json:"resolver"`
	Retry     int `json:"retry"`
	Completer int `json:"completer"`
	Owner     int `json:"owner"`
	// AwaitingRetry ones were found not done (by the completer, which
	// leaves the record for a retry that takes it over as the next
	// attempt) and no retry came back before the run ended.
	AwaitingRetry int `json:"awaiting_retry"`
	Unresolved    int `json:"unresolved"`
	// Calls counts the resolve calls by "source/outcome"; Refused the
	// requests the upstream refused because of its not_done fence.
	Calls   map[string]int `json:"calls"`
	Refused int            `json:"refused"`
}

// Result is the verdict on a history.
type Result struct {
	Requests  int            `json:"requests"`
	Effects   int            `json:"effects"`
	Keys      int            `json:"keys"`
	Outcomes  map[string]int `json:"outcomes"` // answers by kind: new, replayed, 409, 422, 5xx, error
	Anomalies []Anomaly      `json:"anomalies"`
	Repeats   []Repeat       `json:"repeats"`
	Unknowns  *Unknowns      `json:"unknowns,omitempty"`
}

// RepeatsByCause counts the repeats of each cause.
func (r *Result) RepeatsByCause() map[string]int {
	m := map[string]int{}
	for _, d := range r.Repeats {
		m[d.Cause]++
	}
	return m
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
	if opt.Lease == 0 {
		opt.Lease = 3 * time.Second
	}
	if opt.UpstreamTimeout == 0 {
		opt.UpstreamTimeout = time.Second
	}
	if opt.StoreTimeout == 0 {
		opt.StoreTimeout = time.Second
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
	byID := map[int64]*Request{}
	for i := range h.Requests {
		q := &h.Requests[i]
		byID[q.ID] = q
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

		for _, e := range effs {
			if e.Op != op {
				bad(AnomalyMismatchRan, tk, nil, []int64{effs[0].Seq, e.Seq}, "effect %d ran op %q, but the key belongs to op %q", e.Seq, e.Op, op)
			}
		}
		// A repeat is the effect of a later attempt: it ran because the
		// attempt before it stored no result. In attempt order (a lease
		// loss can let an earlier attempt act after a later one).
		byAttempt := slices.Clone(effs)
		slices.SortStableFunc(byAttempt, func(a, b *Effect) int { return a.Attempt - b.Attempt })
		for j := 1; j < len(byAttempt); j++ {
			prev, e := byAttempt[j-1], byAttempt[j]
			effIDs := []int64{prev.Seq, e.Seq}
			if opt.Resolve {
				bad(AnomalyResolvedRepeat, tk, nil, effIDs, "effect %d (attempt %d, gateway %d, %s) repeats effect %d (attempt %d, gateway %d, %s) although the gateways ask the resolve URL",
					e.Seq, e.Attempt, e.Gateway, e.Start.Format(time.StampMilli), prev.Seq, prev.Attempt, prev.Gateway, prev.Start.Format(time.StampMilli))
				continue
			}
			q := byID[prev.Request]
			if q == nil {
				bad(AnomalyDuplicate, tk, nil, effIDs, "effect %d repeats effect %d, whose request %d is not in the history", e.Seq, prev.Seq, prev.Request)
				continue
			}
			// On the wall clock, as the gateways judge leases (a store
			// compares LeaseUntil = Now + Lease, wall times of separate
			// processes; docs/guarantees.md, Time): a wall clock stepped
			// forward ends a lease early in elapsed time, and Params.ClockStep
			// reports how far it stepped during the run.
			gap := e.Start.Round(0).Sub(q.Start.Round(0))
			if gap < opt.Lease {
				bad(AnomalyEarlyRepeat, tk, []int64{q.ID}, effIDs, "effect %d (attempt %d, gateway %d) started %s after request %d of the attempt it repeats (effect %d, attempt %d, gateway %d): sooner than the lease %s",
					e.Seq, e.Attempt, e.Gateway, gap.Round(time.Millisecond), q.ID, prev.Seq, prev.Attempt, prev.Gateway, opt.Lease)
				continue
			}
			d, ok := attribute(h.Faults, prev, q, opt)
			if !ok {
				bad(AnomalyDuplicate, tk, []int64{q.ID}, effIDs,
					"effect %d (attempt %d, gateway %d, %s) repeats effect %d (attempt %d, gateway %d, %s, request %d) and no injected event of that attempt explains it",
					e.Seq, e.Attempt, e.Gateway, e.Start.Format(time.StampMilli), prev.Seq, prev.Attempt, prev.Gateway, prev.Start.Format(time.StampMilli), q.ID)
				continue
			}
			d.Tenant, d.Key, d.First, d.Repeat, d.Attempts, d.Gateway, d.GapMillis = tk.tenant, tk.key, prev.Seq, e.Seq, [2]int{prev.Attempt, e.Attempt}, prev.Gateway, gap.Milliseconds()
			res.Repeats = append(res.Repeats, d)
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
	if opt.Resolve {
		res.Unknowns = unknowns(h)
		for _, st := range h.Stranded {
			if st.AwaitingRetry && notDone(h, st.Key, st.Attempt) {
				continue // resolved not done; no retry came back for it
			}
			res.Anomalies = append(res.Anomalies, Anomaly{Kind: AnomalyUnresolved, Key: st.Key,
				Detail: fmt.Sprintf("key %q attempt %d still processing after the run settled (lease until %s, abandoned %v)", st.Key, st.Attempt, st.LeaseUntil.Format(time.StampMilli), st.Abandoned)})
		}
	}
	return res
}

// notDone reports whether a resolve call answered not_done for attempt of
// key (the resolve mode's keys are unique across tenants).
func notDone(h *History, key string, attempt int) bool {
	for _, v := range h.Resolves {
		if v.Key == key && v.Attempt == attempt && v.Outcome == ResolveNotDone {
			return true
		}
	}
	return false
}

// unknowns counts the unknown outcomes of a resolve-mode history by what
// resolved them. An unknown outcome is an attempt of a key that a resolve
// call asked about or that was left stranded (the resolve mode's keys are
// unique across tenants). The first call that decided (done or not_done)
// resolved it; a later one found the decision written, or lost to it
// (the store's fencing lets one decision take effect).
func unknowns(h *History) *Unknowns {
	type attemptKey struct {
		key     string
		attempt int
	}
	u := &Unknowns{Calls: map[string]int{}, Refused: len(h.Refusals)}
	decided := map[attemptKey]string{}
	var order []attemptKey
	seen := map[attemptKey]bool{}
	resolves := slices.Clone(h.Resolves)
	sort.SliceStable(resolves, func(i, j int) bool { return resolves[i].At.Before(resolves[j].At) })
	for _, v := range resolves {
		u.Calls[v.Source+"/"+v.Outcome]++
		ak := attemptKey{v.Key, v.Attempt}
		if !seen[ak] {
			seen[ak] = true
			order = append(order, ak)
		}
		if decided[ak] != "" || v.Outcome == ResolveUnknown {
			continue
		}
		switch {
		case v.Source == SourceCompleter:
			decided[ak] = "completer"
		case v.Outcome == ResolveDone:
			decided[ak] = "resolver"
		default:
			decided[ak] = "retry"
		}
	}
	stranded, awaiting := map[attemptKey]bool{}, map[attemptKey]bool{}
	for _, st := range h.Stranded {
		ak := attemptKey{st.Key, st.Attempt}
		if st.AwaitingRetry && decided[ak] != "" && notDone(h, st.Key, st.Attempt) {
			awaiting[ak] = true
		} else {
			stranded[ak] = true
		}
		if !seen[ak] {
			seen[ak] = true
			order = append(order, ak)
		}
	}
	for _, ak := range order {
		u.Total++
		switch {
		case stranded[ak]:
			u.Unresolved++
		case awaiting[ak]:
			u.AwaitingRetry++
		case decided[ak] == "completer":
			u.Completer++
		case decided[ak] == "resolver":
			u.Resolver++
		case decided[ak] == "retry":
			u.Retry++
		default:
			u.Owner++
		}
	}
	return u
}

// exchangeEnd is the latest the exchange of effect e can have ended: its
// answer, or the gateway's upstream timeout after the request arrived.
func exchangeEnd(e *Effect, opt CheckOptions) time.Time {
	end := e.End
	if t := e.Start.Add(opt.UpstreamTimeout); t.After(end) {
		end = t
	}
	return end
}

// inFlightUntil bounds how long the key of effect e can have been in
// flight at its gateway: until its client had e's answer (the gateway
// settles the record before it answers), else until the exchange and the
// completion's two store calls could have ended.
func inFlightUntil(e *Effect, q *Request, opt CheckOptions) time.Time {
	if a, ok := parseAnswer(q.Body); ok && q.Err == "" && a.Effect == e.Seq && !q.Replayed {
		return q.End
	}
	end := exchangeEnd(e, opt).Add(2*opt.StoreTimeout + cutGrace)
	if q.End.After(end) {
		end = q.End
	}
	return end
}

// attribute finds the one injected event of effect e's attempt (its
// request q) that left its result unstored.
func attribute(faults []Fault, e *Effect, q *Request, opt CheckOptions) (Repeat, bool) {
	until := inFlightUntil(e, q, opt)
	ended := e.CutAt
	if ended.IsZero() {
		ended = e.ClosedAt
	}
	connEnded := !ended.IsZero() && !ended.Before(e.Start) && !ended.After(exchangeEnd(e, opt).Add(cutGrace))
	onGateway := func(f *Fault) bool { return f.Gateway == -1 || f.Gateway == e.Gateway }
	for k := range faults {
		f := &faults[k]
		if f.Link == LinkService && f.Kind == FaultSlow && f.Effect == e.Seq {
			return Repeat{Cause: CauseSlowAnswer, Fault: f, Detail: fmt.Sprintf("the upstream answered effect %d after %s", e.Seq, f.End.Sub(f.Start).Round(time.Millisecond))}, true
		}
	}
	for k := range faults {
		f := &faults[k]
		if f.Link == LinkProcess && f.Kind == FaultKill && onGateway(f) && !f.Start.Before(q.Start) && !f.Start.After(until) {
			return Repeat{Cause: CauseKill, Fault: f, Detail: fmt.Sprintf("gateway %d killed at %s, %s after request %d began, while its key was in flight there",
				e.Gateway, f.Start.Format("15:04:05.000"), f.Start.Sub(q.Start).Round(time.Millisecond), q.ID)}, true
		}
	}
	if connEnded {
		for k := range faults {
			f := &faults[k]
			end := f.End
			if end.IsZero() {
				end = ended
			}
			if f.Link == LinkUpstream && onGateway(f) && !ended.Before(f.Start) && !ended.After(end.Add(cutGrace)) {
				return Repeat{Cause: CauseUpstreamCut, Fault: f, Detail: fmt.Sprintf("connection %d of effect %d ended %s after the request arrived, during %s on gateway %d's upstream link",
					e.Conn, e.Seq, ended.Sub(e.Start).Round(time.Millisecond), f.Kind, e.Gateway)}, true
			}
		}
	}
	for k := range faults {
		f := &faults[k]
		end := f.End
		if end.IsZero() {
			end = until
		}
		if f.Link == LinkStore && onGateway(f) && !f.Start.After(until) && !end.Before(q.Start) {
			return Repeat{Cause: CauseLeaseLost, Fault: f, Detail: fmt.Sprintf("gateway %d's store link had %s from %s to %s, while request %d's key was in flight there",
				e.Gateway, f.Kind, f.Start.Format("15:04:05.000"), end.Format("15:04:05.000"), q.ID)}, true
		}
	}
	if connEnded && !e.CutAt.IsZero() {
		return Repeat{Cause: CauseGatewayGaveUp, Detail: fmt.Sprintf("connection %d of effect %d was closed %s after the request arrived, before the answer, with no fault on the link",
			e.Conn, e.Seq, e.CutAt.Sub(e.Start).Round(time.Millisecond))}, true
	}
	return Repeat{}, false
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
