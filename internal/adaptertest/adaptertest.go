// Package adaptertest is the black-box suite that every retrysafe adapter
// runs: the net/http middleware, the Gin and Fiber adapters, the Echo and
// chi recipes and the gRPC interceptor. It knows no transport. An adapter's
// test says how to start a server around a handler of the suite's
// ([Adapter]) and how to send it one call ([Client]), and maps its answers
// onto a few [Kind]s; [Run] then checks, against the memory store:
//
//   - replay: a completed call is replayed byte for byte (body and
//     metadata), marked replayed, and its effect ran once;
//   - mismatch: a key reused with another body is refused, nothing runs;
//   - in flight: a duplicate of a call still running is refused at once;
//   - required key: without a key (when required) or with an invalid one
//     (a malformed quoted string, a list, too long: all printable ASCII, so
//     every transport can send them), nothing runs;
//   - tenant scope: two tenants that send the same key and body each get
//     their own effect and their own answer;
//   - concurrency: 50 duplicates sent together (49 of them while the first
//     is held inside the handler) make exactly one effect, and every
//     answer is the one effect's bytes;
//   - client gone: a caller that hangs up mid-call does not stop the
//     operation (its context stays alive), and the retry gets its result.
//
// The package uses only the standard library and the root module, so that
// any module of the repository may run it.
package adaptertest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// Call is one request of the suite, for a Client to send.
type Call struct {
	// Key is the idempotency key, sent as the transport sends keys
	// (Idempotency-Key, gRPC metadata); "" sends none.
	Key string
	// Tenant is the caller's identity. The adapter must scope records by
	// it, as its users scope them by authentication: HTTP adapters send it
	// as "Authorization: Bearer <Tenant>" (the middleware's default
	// scope), a gRPC test through its scope callback.
	Tenant string
	// Body is the request payload: part of the fingerprint, handed to the
	// Handler unchanged.
	Body []byte
}

// Kind classifies an answer, whatever the transport's codes.
type Kind int

const (
	// KindOther is any answer the Client cannot place; Reply.Detail says
	// what it was.
	KindOther Kind = iota
	// KindAnswer is the handler's answer, first or replayed.
	KindAnswer
	// KindBadKey is a refusal of a missing (required) or invalid key
	// (HTTP 400, gRPC InvalidArgument).
	KindBadKey
	// KindMismatch is a refusal of a key reused with another request
	// (HTTP 422, gRPC FailedPrecondition).
	KindMismatch
	// KindInProgress is a refusal of a duplicate while the original runs
	// (HTTP 409, gRPC Aborted).
	KindInProgress
)

func (k Kind) String() string {
	switch k {
	case KindAnswer:
		return "answer"
	case KindBadKey:
		return "bad-key"
	case KindMismatch:
		return "mismatch"
	case KindInProgress:
		return "in-progress"
	}
	return "other"
}

// Reply is what a Client read back.
type Reply struct {
	Kind Kind
	// Body and Meta are the handler's Answer as the client received it
	// (KindAnswer only).
	Body []byte
	Meta string
	// Replayed is the transport's replay marker (Idempotent-Replayed:
	// true, idempotent-replayed metadata).
	Replayed bool
	// Detail describes the answer for failure messages (status, code).
	Detail string
}

// Answer is what the suite's Handler returns; the adapter's handler sends
// it as its framework would: Body as the response bytes (HTTP: status 201,
// the body as it is; gRPC: the response message), Meta as response
// metadata (HTTP: the header [MetaHeader]).
type Answer struct {
	Body []byte
	Meta string
}

// MetaHeader is the response header in which HTTP adapters send
// Answer.Meta.
const MetaHeader = "X-Adaptertest-Meta"

// Handler is the suite's business code. The adapter's handler calls it
// with the context its framework gives a handler (it must carry the
// retrysafe Operation, and outlive a client that hangs up) and the
// request payload, and sends its Answer.
type Handler func(ctx context.Context, body []byte) Answer

// Adapter is one adapter under test.
type Adapter interface {
	// Start serves h behind the adapter, configured with cfg (the suite
	// sets Store, RequireKey, InFlight, WaitTimeout and Lease; the adapter
	// maps Call.Tenant to the scope itself and may set other fields), and
	// returns a Client for it. The server is stopped with t.Cleanup.
	Start(t *testing.T, cfg retrysafe.Config, h Handler) Client
}

// Client sends calls to one started server.
type Client interface {
	// Send sends c and reads the answer. An error means that no answer
	// was read (a transport failure, or ctx ended).
	Send(ctx context.Context, c Call) (Reply, error)
}

// callTimeout bounds every call and every wait of the suite, so that a
// broken adapter fails rather than hangs.
const callTimeout = 20 * time.Second

// Run runs the suite against a, each scenario a parallel subtest with a
// server and a store of its own.
func Run(t *testing.T, a Adapter) {
	t.Helper()
	for _, sc := range []struct {
		name string
		run  func(t *testing.T, a Adapter)
	}{
		{"replay", testReplay},
		{"mismatch", testMismatch},
		{"in_flight", testInFlight},
		{"required_key", testRequiredKey},
		{"tenant_scope", testTenantScope},
		{"concurrency", testConcurrency},
		{"client_gone", testClientGone},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, a)
		})
	}
}

// effects is the suite's handler: it counts its runs and answers with
// bytes no framework may rewrite unnoticed (a NUL, invalid UTF-8, CR LF, a
// missing trailing newline), numbered by run. Before answering it calls
// hold, if set, with the run's number and context.
type effects struct {
	t    *testing.T
	runs atomic.Int64
	hold func(n int64, ctx context.Context)
	// unkeyed: the calls carry no key, so they pass through unprotected
	// and their context carries no Operation.
	unkeyed bool
	mu      sync.Mutex
	ctxOK   []bool // per run: the context was still alive when it answered
}

func (e *effects) handle(ctx context.Context, body []byte) Answer {
	n := e.runs.Add(1)
	if !e.unkeyed && retrysafe.OperationFromContext(ctx) == nil {
		e.t.Errorf("run %d: the handler's context carries no retrysafe Operation", n)
	}
	if e.hold != nil {
		e.hold(n, ctx)
	}
	e.mu.Lock()
	e.ctxOK = append(e.ctxOK, ctx.Err() == nil)
	e.mu.Unlock()
	return answerFor(n, body)
}

// answerFor is the answer of run n to a request with body.
func answerFor(n int64, body []byte) Answer {
	b := fmt.Appendf(nil, `{"run":%d,"echo":%q}`, n, body)
	b = append(b, 0, 0xff, 0xfe, '\r', '\n', '\t', 'x')
	return Answer{Body: b, Meta: fmt.Sprintf("meta-%d", n)}
}

func start(t *testing.T, a Adapter, cfg retrysafe.Config, e *effects) Client {
	t.Helper()
	store := memory.New(memory.Config{})
	t.Cleanup(func() { _ = store.Close() })
	cfg.Store = store
	if cfg.Lease == 0 {
		cfg.Lease = 10 * time.Second
	}
	e.t = t
	return a.Start(t, cfg, e.handle)
}

func send(t *testing.T, c Client, call Call) Reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	r, err := c.Send(ctx, call)
	if err != nil {
		t.Fatalf("send key %q tenant %q: %v", call.Key, call.Tenant, err)
	}
	return r
}

// wantAnswer fails t unless r is answer a, with the replay marker as
// replayed says.
func wantAnswer(t *testing.T, what string, r Reply, a Answer, replayed bool) {
	t.Helper()
	switch {
	case r.Kind != KindAnswer:
		t.Errorf("%s: got %v (%s), want the handler's answer", what, r.Kind, r.Detail)
	case !bytes.Equal(r.Body, a.Body):
		t.Errorf("%s: body %q, want %q byte for byte", what, r.Body, a.Body)
	case r.Meta != a.Meta:
		t.Errorf("%s: meta %q, want %q", what, r.Meta, a.Meta)
	case r.Replayed != replayed:
		t.Errorf("%s: replayed %v, want %v", what, r.Replayed, replayed)
	}
}

func wantKind(t *testing.T, what string, r Reply, k Kind) {
	t.Helper()
	if r.Kind != k {
		t.Errorf("%s: got %v (%s), want %v", what, r.Kind, r.Detail, k)
	}
}

func wantRuns(t *testing.T, e *effects, n int64) {
	t.Helper()
	if got := e.runs.Load(); got != n {
		t.Errorf("the handler ran %d times, want %d", got, n)
	}
}

func testReplay(t *testing.T, a Adapter) {
	e := &effects{}
	c := start(t, a, retrysafe.Config{}, e)
	call := Call{Key: "replay-1", Tenant: "alice", Body: []byte(`{"amount":100}`)}
	want := answerFor(1, call.Body)
	wantAnswer(t, "first call", send(t, c, call), want, false)
	for i := range 3 {
		wantAnswer(t, fmt.Sprintf("retry %d", i+1), send(t, c, call), want, true)
	}
	wantRuns(t, e, 1)
	// Another key is another operation.
	other := call
	other.Key = "replay-2"
	wantAnswer(t, "another key", send(t, c, other), answerFor(2, call.Body), false)
	wantRuns(t, e, 2)
}

func testMismatch(t *testing.T, a Adapter) {
	e := &effects{}
	c := start(t, a, retrysafe.Config{}, e)
	call := Call{Key: "mismatch-1", Tenant: "alice", Body: []byte(`{"amount":100}`)}
	wantAnswer(t, "first call", send(t, c, call), answerFor(1, call.Body), false)
	changed := call
	changed.Body = []byte(`{"amount":999}`)
	wantKind(t, "same key, another body", send(t, c, changed), KindMismatch)
	wantRuns(t, e, 1)
	wantAnswer(t, "the original again", send(t, c, call), answerFor(1, call.Body), true)
}

func testInFlight(t *testing.T, a Adapter) {
	started, release := make(chan struct{}), make(chan struct{})
	e := &effects{hold: func(n int64, _ context.Context) {
		if n == 1 {
			close(started)
			wait(release)
		}
	}}
	c := start(t, a, retrysafe.Config{InFlight: retrysafe.InFlightConflict}, e)
	call := Call{Key: "inflight-1", Tenant: "alice", Body: []byte(`{"amount":100}`)}
	first := make(chan Reply, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		r, err := c.Send(ctx, call)
		if err != nil {
			r = Reply{Detail: err.Error()}
		}
		first <- r
	}()
	if !wait(started) {
		t.Fatal("the first call never reached the handler")
	}
	wantKind(t, "duplicate while the first runs", send(t, c, call), KindInProgress)
	changed := call
	changed.Body = []byte(`{"amount":1}`)
	wantKind(t, "another body while the first runs", send(t, c, changed), KindMismatch)
	close(release)
	wantAnswer(t, "first call", <-first, answerFor(1, call.Body), false)
	wantAnswer(t, "retry after it completed", send(t, c, call), answerFor(1, call.Body), true)
	wantRuns(t, e, 1)
}

func testRequiredKey(t *testing.T, a Adapter) {
	e := &effects{}
	c := start(t, a, retrysafe.Config{RequireKey: true}, e)
	body := []byte(`{"amount":100}`)
	wantKind(t, "no key", send(t, c, Call{Tenant: "alice", Body: body}), KindBadKey)
	for _, bad := range []string{`"unterminated`, "one,two", string(bytes.Repeat([]byte("k"), retrysafe.MaxKeyLength+1))} {
		wantKind(t, fmt.Sprintf("invalid key %.12q", bad), send(t, c, Call{Key: bad, Tenant: "alice", Body: body}), KindBadKey)
	}
	wantRuns(t, e, 0)
	wantAnswer(t, "a valid key", send(t, c, Call{Key: "required-1", Tenant: "alice", Body: body}), answerFor(1, body), false)

	// Not required: a call without a key runs, unprotected, every time.
	e2 := &effects{unkeyed: true}
	c2 := start(t, a, retrysafe.Config{}, e2)
	for i := range 2 {
		wantAnswer(t, fmt.Sprintf("no key, not required, call %d", i+1), send(t, c2, Call{Tenant: "alice", Body: body}), answerFor(int64(i+1), body), false)
	}
	wantRuns(t, e2, 2)
}

func testTenantScope(t *testing.T, a Adapter) {
	e := &effects{}
	c := start(t, a, retrysafe.Config{}, e)
	body := []byte(`{"amount":100}`)
	alice := Call{Key: "shared-key", Tenant: "alice", Body: body}
	bob := Call{Key: "shared-key", Tenant: "bob", Body: body}
	wantAnswer(t, "alice", send(t, c, alice), answerFor(1, body), false)
	wantAnswer(t, "bob, same key and body", send(t, c, bob), answerFor(2, body), false)
	wantAnswer(t, "alice's retry", send(t, c, alice), answerFor(1, body), true)
	wantAnswer(t, "bob's retry", send(t, c, bob), answerFor(2, body), true)
	// Another tenant's key never mismatches: it is another key.
	carol := Call{Key: "shared-key", Tenant: "carol", Body: []byte(`{"amount":7}`)}
	wantAnswer(t, "carol, same key, another body", send(t, c, carol), answerFor(3, carol.Body), false)
	wantRuns(t, e, 3)
}

// duplicates is how many copies of one call the concurrency test sends.
const duplicates = 50

func testConcurrency(t *testing.T, a Adapter) {
	t.Run("conflict", func(t *testing.T) {
		t.Parallel()
		// The first call to claim the key is held in the handler until
		// the other 49 have been answered: they overlap it for certain,
		// and each must be refused as in progress.
		release := make(chan struct{})
		e := &effects{hold: func(n int64, _ context.Context) {
			if n == 1 { // a second run is a failure already: no need to hold it
				wait(release)
			}
		}}
		c := start(t, a, retrysafe.Config{InFlight: retrysafe.InFlightConflict}, e)
		call := Call{Key: "concurrent-1", Tenant: "alice", Body: []byte(`{"amount":100}`)}
		replies := make(chan Reply, duplicates)
		var ready sync.WaitGroup
		ready.Add(duplicates)
		go0 := make(chan struct{})
		for range duplicates {
			go func() {
				ready.Done()
				<-go0
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				defer cancel()
				r, err := c.Send(ctx, call)
				if err != nil {
					r = Reply{Detail: err.Error()}
				}
				replies <- r
			}()
		}
		ready.Wait()
		close(go0)
		for i := range duplicates - 1 {
			select {
			case r := <-replies:
				wantKind(t, fmt.Sprintf("duplicate %d while one runs", i+1), r, KindInProgress)
			case <-time.After(callTimeout):
				close(release)
				t.Fatalf("only %d of %d duplicates were answered while the first ran", i, duplicates-1)
			}
		}
		close(release)
		wantAnswer(t, "the one that ran", <-replies, answerFor(1, call.Body), false)
		wantRuns(t, e, 1)
		wantAnswer(t, "a retry", send(t, c, call), answerFor(1, call.Body), true)
	})
	t.Run("wait", func(t *testing.T) {
		t.Parallel()
		// Duplicates wait for the first and get its answer; the first
		// is held until many have arrived (or a while has passed).
		var arrived atomic.Int64
		e := &effects{hold: func(int64, context.Context) {
			deadline := time.Now().Add(2 * time.Second)
			for arrived.Load() < duplicates && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond)
		}}
		c := start(t, a, retrysafe.Config{InFlight: retrysafe.InFlightWait, WaitTimeout: callTimeout}, e)
		call := Call{Key: "concurrent-2", Tenant: "alice", Body: []byte(`{"amount":100}`)}
		replies := make(chan Reply, duplicates)
		for range duplicates {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				defer cancel()
				arrived.Add(1)
				r, err := c.Send(ctx, call)
				if err != nil {
					r = Reply{Detail: err.Error()}
				}
				replies <- r
			}()
		}
		fresh := 0
		for i := range duplicates {
			r := <-replies
			if r.Kind == KindAnswer && !r.Replayed {
				fresh++
			}
			wantAnswer(t, fmt.Sprintf("duplicate %d", i+1), r, answerFor(1, call.Body), r.Replayed)
		}
		if fresh != 1 {
			t.Errorf("%d answers were not marked replayed, want exactly 1", fresh)
		}
		wantRuns(t, e, 1)
	})
}

func testClientGone(t *testing.T, a Adapter) {
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	e := &effects{hold: func(n int64, ctx context.Context) {
		if n != 1 {
			return
		}
		close(started)
		wait(release)
	}}
	c := start(t, a, retrysafe.Config{}, e)
	call := Call{Key: "gone-1", Tenant: "alice", Body: []byte(`{"amount":100}`)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(done)
		_, _ = c.Send(ctx, call) // whatever it says: the client has gone
	}()
	if !wait(started) {
		cancel()
		t.Fatal("the call never reached the handler")
	}
	cancel()
	if !wait(done) {
		t.Fatal("Send did not return after its context was cancelled")
	}
	time.Sleep(50 * time.Millisecond) // let the server see the hang-up
	close(release)
	// The operation goes on without its client and stores its answer:
	// the retry gets it (once it is stored; until then, in progress).
	want := answerFor(1, call.Body)
	deadline := time.Now().Add(callTimeout)
	for {
		r := send(t, c, call)
		if r.Kind == KindInProgress && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		wantAnswer(t, "the retry after the client went away", r, want, true)
		break
	}
	wantRuns(t, e, 1)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ctxOK) != 1 || !e.ctxOK[0] {
		t.Errorf("the handler's context was cancelled when the client went away (alive per run: %v)", e.ctxOK)
	}
}

// wait waits for ch to be closed, up to callTimeout; false if it was not.
func wait(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(callTimeout):
		return false
	}
}
