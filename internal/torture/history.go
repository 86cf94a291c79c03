// Package torture is a Jepsen-style test of retrysafe's promise, at most
// one effect per key, under faults. The harness ([Run]) starts several
// `retrysafe serve` processes of the real binary on one shared store in front
// of a counting upstream, drives them with concurrent clients that retry
// like real ones, injects faults with Toxiproxy on the client→gateway,
// gateway→upstream and gateway→store links and kills and restarts gateways,
// and records a [History]. [Check] then judges the whole history against
// the promise; [CheckStore] checks histories of store operations for
// linearizability against a model of the state machine in store.go.
package torture

import (
	"sync"
	"time"
)

// Links on which faults are injected, and the pseudo-link of process faults.
const (
	LinkClient   = "client-gateway"
	LinkUpstream = "gateway-upstream"
	LinkStore    = "gateway-store"
	LinkProcess  = "process"
	LinkService  = "upstream" // the upstream itself (slow answers)
	// LinkReported marks what a gateway's own log says went wrong, injected
	// fault or not (an upstream that did not answer in time on a loaded
	// machine, a store call that timed out): the documented window opened
	// without help.
	LinkReported = "gateway-reported"
)

// Fault kinds.
const (
	FaultLatency   = "latency"    // latency with jitter
	FaultResetReq  = "reset-req"  // connection reset mid-request (limit_data upstream + reset)
	FaultResetResp = "reset-resp" // connection reset mid-response (limit_data downstream)
	FaultResetPeer = "reset-peer" // reset_peer: every connection is reset
	FaultTimeout   = "timeout"    // data stops flowing, connections close after a while
	FaultBandwidth = "bandwidth"  // bandwidth limit (with slicer)
	FaultDown      = "down"       // proxy disabled: connections refused, open ones closed
	FaultKill      = "sigkill"    // gateway process killed with SIGKILL (then restarted)
	FaultTerm      = "sigterm"    // gateway process stopped with SIGTERM (then restarted)
	FaultSlow      = "slow"       // the upstream answered slower than the gateway waits
	// FaultSilentCut is the silent-cut mutation's own cut: the upstream
	// drops an answer after acting. It is recorded for the report but is
	// no injected fault: the checker must not accept it as a cause.
	FaultSilentCut = "silent-cut"

	// Kinds of LinkReported events, from the gateways' logs.
	ReportedOutcomeUnknown = "outcome-unknown" // the upstream may have acted; the key stays locked until the lease runs out
	ReportedNotStored      = "not-stored"      // Complete failed after the upstream answered
	ReportedLeaseLost      = "lease-lost"      // another request took the lease over
	ReportedRenewalFailed  = "renewal-failed"  // a heartbeat could not extend the lease
)

// Request is one client request as the client saw it.
type Request struct {
	// ID is sent with the request as X-Torture-Request; the gateway
	// forwards it, so every effect names the request that caused it.
	ID      int64  `json:"id"`
	Client  int    `json:"client"`
	Gateway int    `json:"gateway"`
	Mode    string `json:"mode"` // the gateway's --in-flight mode
	Tenant  string `json:"tenant"`
	Key     string `json:"key"`
	// Op is the fingerprint label: the "op" field of the JSON body. Two
	// requests with one key and different Op have different fingerprints.
	Op       string    `json:"op"`
	Mismatch bool      `json:"mismatch,omitempty"` // deliberate reuse of the key with another body
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	// Err is the transport error, if the client got no complete answer.
	Err      string            `json:"err,omitempty"`
	Status   int               `json:"status,omitempty"`
	Header   map[string]string `json:"header,omitempty"` // the compared headers (see ComparedHeaders)
	Body     []byte            `json:"body,omitempty"`
	Replayed bool              `json:"replayed,omitempty"`
}

// Effect is one call that reached the upstream's handler with a complete
// body: the upstream acted.
type Effect struct {
	Seq     int64 `json:"seq"`
	Gateway int   `json:"gateway"` // which gateway's upstream link it came through
	// Request is the client request whose forwarded X-Torture-Request
	// header the upstream saw; Attempt its Idempotency-Attempt (1 on a
	// first claim, N on the (N-1)th takeover).
	Request int64 `json:"request"`
	Attempt int   `json:"attempt"`
	// Conn numbers the upstream connection it came on (one per TCP
	// connection the upstream accepted, from its gateway's proxy).
	// CutAt is when that connection ended before the answer was written
	// (the gateway or a fault closed it); ClosedAt when it closed at all
	// (zero: still open at the end of the run).
	Conn     int64             `json:"conn"`
	CutAt    time.Time         `json:"cut_at,omitzero"`
	ClosedAt time.Time         `json:"closed_at,omitzero"`
	Tenant   string            `json:"tenant"` // from the Authorization header the upstream saw
	Key      string            `json:"key"`    // from the Idempotency-Key header the upstream saw
	Op       string            `json:"op"`     // from the body
	Start    time.Time         `json:"start"`
	End      time.Time         `json:"end"`
	Status   int               `json:"status"`
	Header   map[string]string `json:"header"`
	Body     []byte            `json:"body"`
}

// Resolve sources and outcomes.
const (
	SourceRetry     = "retry"     // the resolve call of a retry (it carries the retry's Authorization)
	SourceCompleter = "completer" // the sweeper's completer (no caller headers)
	ResolveDone     = "done"
	ResolveNotDone  = "not_done"
	ResolveUnknown  = "unknown"
)

// Resolve is one call to the upstream's resolve URL, as the upstream
// answered it from its own effect log.
type Resolve struct {
	Gateway int       `json:"gateway"`
	Source  string    `json:"source"`
	Tenant  string    `json:"tenant"`
	Key     string    `json:"key"`
	Attempt int       `json:"attempt"` // the attempt whose outcome is unknown
	At      time.Time `json:"at"`
	Outcome string    `json:"outcome"`
	Effect  int64     `json:"effect,omitempty"` // with done: the effect whose answer it gave
}

// Refusal is a request the upstream did not perform because it had
// answered not_done for that attempt of the key or a later one (the fence
// of docs/gateway.md: a not_done is a promise): it hung up without acting.
type Refusal struct {
	Gateway int       `json:"gateway"`
	Tenant  string    `json:"tenant"`
	Key     string    `json:"key"`
	Attempt int       `json:"attempt"`
	Fence   int       `json:"fence"`
	Request int64     `json:"request"`
	At      time.Time `json:"at"`
}

// Stranded is a record the store still held as processing, its lease
// run out, when the run had settled: an unknown outcome never resolved,
// unless AwaitingRetry (Record.ResolvedNotDone: the completer found the
// attempt not done and left the record for a retry that never came).
type Stranded struct {
	Scope         string    `json:"scope"`
	Key           string    `json:"key"`
	Attempt       int       `json:"attempt"`
	LeaseUntil    time.Time `json:"lease_until"`
	Abandoned     bool      `json:"abandoned,omitempty"`
	AwaitingRetry bool      `json:"awaiting_retry,omitempty"`
}

// Fault is one injected fault and the window in which it was active.
type Fault struct {
	ID      int       `json:"id"`
	Kind    string    `json:"kind"`
	Link    string    `json:"link"`
	Gateway int       `json:"gateway"` // -1: every gateway
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Detail  string    `json:"detail,omitempty"`
	// Effect is, for a slow upstream answer, the effect it delayed: it
	// explains a repeat of that effect only.
	Effect int64 `json:"effect,omitempty"`
}

// ComparedHeaders are the response headers the checker compares between an
// original answer and its replays. The upstream sets all of them; the
// gateway stores them (none is hop-by-hop or Set-Cookie).
var ComparedHeaders = []string{"Content-Type", "X-Torture-Effect", "X-Torture-Tenant", "Cache-Control"}

// Params describe a run, for the report.
type Params struct {
	Store    string        `json:"store"`
	Gateways int           `json:"gateways"`
	Clients  int           `json:"clients"`
	Tenants  int           `json:"tenants"`
	Duration time.Duration `json:"duration"`
	MaxOps   int64         `json:"max_ops,omitempty"`
	Lease    time.Duration `json:"lease"`
	Faults   bool          `json:"faults"`
	Mutation string        `json:"mutation,omitempty"`
	// Resolve is the resolve mode: the gateways ask the upstream's
	// resolve URL about unknown outcomes (--resolve-url), and the
	// completer runs every SweepInterval.
	Resolve       bool          `json:"resolve,omitempty"`
	SweepInterval time.Duration `json:"sweep_interval,omitempty"`
	// UpstreamTimeout and StoreTimeout are the gateways' timeouts (zero in
	// histories written before they were recorded: 1s each).
	UpstreamTimeout time.Duration `json:"upstream_timeout,omitempty"`
	StoreTimeout    time.Duration `json:"store_timeout,omitempty"`
	// ClockStep is the largest difference the harness saw between the
	// wall clock's and the monotonic clock's elapsed time during the run:
	// how far the wall clock, on which leases are judged, was stepped.
	ClockStep time.Duration `json:"clock_step,omitempty"`
}

// History is everything a run observed.
type History struct {
	Params   Params    `json:"params"`
	Requests []Request `json:"requests"`
	Effects  []Effect  `json:"effects"`
	Faults   []Fault   `json:"faults"`
	// The resolve mode's calls, the upstream's refusals, and the
	// records left stranded after the run settled (read from the store;
	// Settled reports that they were read).
	Resolves []Resolve  `json:"resolves,omitempty"`
	Refusals []Refusal  `json:"refusals,omitempty"`
	Stranded []Stranded `json:"stranded,omitempty"`
	Settled  bool       `json:"settled,omitempty"`
}

// recorder collects a history from many goroutines.
type recorder struct {
	mu      sync.Mutex
	h       History
	nextReq int64
	nextEff int64
}

// requestID reserves the ID of a request about to be sent.
func (r *recorder) requestID() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextReq++
	return r.nextReq
}

func (r *recorder) request(q Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Requests = append(r.h.Requests, q)
}

func (r *recorder) resolve(v Resolve) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Resolves = append(r.h.Resolves, v)
}

func (r *recorder) refusal(v Refusal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Refusals = append(r.h.Refusals, v)
}

// cut records when the connection of effect seq ended before its answer.
func (r *recorder) cut(seq int64, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.h.Effects) - 1; i >= 0; i-- {
		if r.h.Effects[i].Seq == seq {
			r.h.Effects[i].CutAt = at
			return
		}
	}
}

// connClosed sets, for every effect on one of the closed connections, when
// it closed.
func (r *recorder) connClosed(closed map[int64]time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.h.Effects {
		if t, ok := closed[r.h.Effects[i].Conn]; ok {
			r.h.Effects[i].ClosedAt = t
		}
	}
}

// effectSeq reserves the sequence number of a new effect.
func (r *recorder) effectSeq() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextEff++
	return r.nextEff
}

func (r *recorder) effect(e Effect) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Effects = append(r.h.Effects, e)
}

// fault records a fault that starts now; the returned function ends it.
func (r *recorder) fault(kind, link string, gateway int, detail string) func() {
	r.mu.Lock()
	id := len(r.h.Faults)
	r.h.Faults = append(r.h.Faults, Fault{ID: id + 1, Kind: kind, Link: link, Gateway: gateway, Start: time.Now(), Detail: detail})
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.h.Faults[id].End = time.Now()
		r.mu.Unlock()
	}
}

// addFault records a fault whose window is known.
func (r *recorder) addFault(f Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f.ID = len(r.h.Faults) + 1
	r.h.Faults = append(r.h.Faults, f)
}

func (r *recorder) history() *History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	h.Requests = append([]Request(nil), r.h.Requests...)
	h.Effects = append([]Effect(nil), r.h.Effects...)
	h.Faults = append([]Fault(nil), r.h.Faults...)
	h.Resolves = append([]Resolve(nil), r.h.Resolves...)
	h.Refusals = append([]Refusal(nil), r.h.Refusals...)
	return &h
}
