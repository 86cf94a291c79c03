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

	// Kinds of LinkReported events, from the gateways' logs.
	ReportedOutcomeUnknown = "outcome-unknown" // the upstream may have acted; the key stays locked until the lease runs out
	ReportedNotStored      = "not-stored"      // Complete failed after the upstream answered
	ReportedLeaseLost      = "lease-lost"      // another request took the lease over
	ReportedRenewalFailed  = "renewal-failed"  // a heartbeat could not extend the lease
)

// Request is one client request as the client saw it.
type Request struct {
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
	Seq     int64             `json:"seq"`
	Gateway int               `json:"gateway"` // which gateway's upstream link it came through
	Tenant  string            `json:"tenant"`  // from the Authorization header the upstream saw
	Key     string            `json:"key"`     // from the Idempotency-Key header the upstream saw
	Op      string            `json:"op"`      // from the body
	Start   time.Time         `json:"start"`
	End     time.Time         `json:"end"`
	Status  int               `json:"status"`
	Header  map[string]string `json:"header"`
	Body    []byte            `json:"body"`
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
}

// History is everything a run observed.
type History struct {
	Params   Params    `json:"params"`
	Requests []Request `json:"requests"`
	Effects  []Effect  `json:"effects"`
	Faults   []Fault   `json:"faults"`
}

// recorder collects a history from many goroutines.
type recorder struct {
	mu      sync.Mutex
	h       History
	nextReq int64
	nextEff int64
}

func (r *recorder) request(q Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextReq++
	q.ID = r.nextReq
	r.h.Requests = append(r.h.Requests, q)
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
	return &h
}
