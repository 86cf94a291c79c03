package retrysafe_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// Tests of issue 30's engine: abandoned attempts, checkpoints, the
// OnUnknown policies, the Resolver and the completer.

var (
	u0     = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	uLease = 30 * time.Second
	quiet  = slog.New(slog.NewTextHandler(io.Discard, nil))
)

// unknownSetup is an Executor over a memory store with a test clock.
type unknownSetup struct {
	store *memory.Store
	clock *testClock
	x     *retrysafe.Executor
}

func newUnknownSetup(t *testing.T, cfg retrysafe.Config) *unknownSetup {
	t.Helper()
	u := &unknownSetup{store: newMemory(t), clock: newTestClock(u0)}
	cfg.Store, cfg.Now, cfg.Lease, cfg.Logger = u.store, u.clock.Now, uLease, quiet
	if cfg.Store == nil {
		t.Fatal("no store")
	}
	x, err := retrysafe.NewExecutor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u.x = x
	return u
}

// record reads key's record (scope "s") from the store.
func (u *unknownSetup) record(t *testing.T, key string) *retrysafe.Record {
	t.Helper()
	rec, err := u.store.Get(context.Background(), &retrysafe.GetParams{Scope: "s", Key: key, Now: u.clock.Now()})
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return rec
}

// strand runs a first attempt of key that records checkpoint name (if not
// empty) and abandons: its outcome is unknown.
func (u *unknownSetup) strand(t *testing.T, key, name string, data []byte) {
	t.Helper()
	_, _, err := u.x.Execute(context.Background(), "s", key, "fp", func(ctx context.Context) *retrysafe.Response {
		op := retrysafe.OperationFromContext(ctx)
		if name != "" {
			if err := op.Checkpoint(ctx, name, data); err != nil {
				t.Errorf("Checkpoint: %v", err)
			}
		}
		op.Abandon()
		return nil
	})
	if err != nil {
		t.Fatalf("first attempt of %q: %v", key, err)
	}
}

// created is the answer the tests' operations give.
func created(body string) *retrysafe.Response {
	return &retrysafe.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte(body)}
}

// wantBlocked fails the test unless err is a blocked outcome-unknown
// refusal.
func wantBlocked(t *testing.T, what string, err error) {
	t.Helper()
	var ip *retrysafe.InProgressError
	if !errors.As(err, &ip) || !ip.OutcomeUnknown || !ip.Blocked {
		t.Fatalf("%s: err = %v, want a blocked outcome-unknown *InProgressError", what, err)
	}
}

// TestAbandonMarksTheRecord: Operation.Abandon writes the abandoned mark
// (the lease left as it was), so the next retry gets 409 outcome-unknown at
// once with Retry-After = the lease left, not "in progress, retry in 1s".
func TestAbandonMarksTheRecord(t *testing.T) {
	t.Parallel()
	clock := newTestClock(u0)
	store := newMemory(t)
	var runs atomic.Int64
	srv := newServer(t, retrysafe.Config{Store: store, Lease: uLease, Now: clock.Now, Logger: quiet}, abandoning(&runs))
	if r := send(t, srv.URL, http.MethodPost, "k", `{}`); r.status != http.StatusGatewayTimeout {
		t.Fatalf("first attempt: %d", r.status)
	}
	rec, err := store.Get(context.Background(), &retrysafe.GetParams{Key: "k", Now: u0})
	if err != nil || !rec.Abandoned || !rec.LeaseUntil.Equal(u0.Add(uLease)) || rec.State != retrysafe.StateProcessing {
		t.Fatalf("record after Abandon: %+v, %v; want processing, abandoned, lease as claimed", rec, err)
	}
	clock.Set(u0.Add(time.Second))
	r := send(t, srv.URL, http.MethodPost, "k", `{}`)
	wantProblem(t, r, http.StatusConflict, retrysafe.ProblemOutcomeUnknown)
	if got := r.header.Get("Retry-After"); got != "29" {
		t.Errorf("Retry-After one second after the abandon = %q, want 29 (the lease left)", got)
	}
	if runs.Load() != 1 {
		t.Fatalf("runs = %d, want 1", runs.Load())
	}
	// The default policy takes it over once the lease ran out.
	clock.Set(u0.Add(uLease))
	if r := send(t, srv.URL, http.MethodPost, "k", `{}`); r.status != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("after the lease: %d, runs %d; want the takeover's 201", r.status, runs.Load())
	}
}

// TestPanicAfterStatusAbandons: a handler that panics after writing its
// status leaves an attempt whose outcome is unknown: the record is marked
// abandoned and kept (not released), and a retry does not run it again
// during the lease. A panic before a status still releases the key.
func TestPanicAfterStatusAbandons(t *testing.T) {
	t.Parallel()
	clock := newTestClock(u0)
	store := newMemory(t)
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		panic("bug after the charge")
	})
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store, Lease: uLease, Now: clock.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	protected := mw(h)
	serve := func() (rec *httptest.ResponseRecorder, panicked bool) {
		defer func() { panicked = recover() != nil }()
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k")
		rec = httptest.NewRecorder()
		protected.ServeHTTP(rec, req)
		return rec, false
	}
	if _, panicked := serve(); !panicked {
		t.Fatal("the panic did not propagate")
	}
	got, err := store.Get(context.Background(), &retrysafe.GetParams{Key: "k", Now: u0})
	if err != nil || !got.Abandoned || got.State != retrysafe.StateProcessing {
		t.Fatalf("record after a panic after the status: %+v, %v; want it processing and abandoned", got, err)
	}
	clock.Set(u0.Add(time.Second))
	rec, panicked := serve()
	if panicked || rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), retrysafe.ProblemOutcomeUnknown) || runs.Load() != 1 {
		t.Fatalf("retry: %d %s (panicked %v), runs %d; want 409 outcome-unknown and no second run", rec.Code, rec.Body, panicked, runs.Load())
	}
}

// TestCheckpointAndResumed: a checkpoint is one fenced store write that
// renews the lease; the attempt that takes the record over finds it with
// Resumed; the first attempt finds none.
func TestCheckpointAndResumed(t *testing.T) {
	t.Parallel()
	u := newUnknownSetup(t, retrysafe.Config{})
	var firstOK bool
	_, _, err := u.x.Execute(context.Background(), "s", "pay", "fp", func(ctx context.Context) *retrysafe.Response {
		op := retrysafe.OperationFromContext(ctx)
		_, _, firstOK = op.Resumed()
		u.clock.Set(u0.Add(10 * time.Second))
		if err := op.Checkpoint(ctx, "charge-requested", []byte("ch_1")); err != nil {
			t.Errorf("Checkpoint: %v", err)
		}
		op.Abandon() // then the process "dies"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if firstOK {
		t.Error("Resumed on the first attempt: ok = true")
	}
	rec := u.record(t, "pay")
	if rec.Checkpoint == nil || rec.Checkpoint.Name != "charge-requested" || string(rec.Checkpoint.Data) != "ch_1" || !rec.Checkpoint.At.Equal(u0.Add(10*time.Second)) {
		t.Fatalf("stored checkpoint %+v", rec.Checkpoint)
	}
	if !rec.LeaseUntil.Equal(u0.Add(10*time.Second + uLease)) {
		t.Errorf("LeaseUntil after the checkpoint = %s, want renewed from the checkpoint", rec.LeaseUntil)
	}

	u.clock.Set(u0.Add(10*time.Second + uLease))
	var name string
	var data []byte
	var ok bool
	var attempt int
	resp, _, err := u.x.Execute(context.Background(), "s", "pay", "fp", func(ctx context.Context) *retrysafe.Response {
		op := retrysafe.OperationFromContext(ctx)
		name, data, ok = op.Resumed()
		attempt = op.Attempt()
		return created("charged " + string(data))
	})
	if err != nil || resp.Status != http.StatusCreated {
		t.Fatalf("takeover: %v %v", resp, err)
	}
	if !ok || name != "charge-requested" || string(data) != "ch_1" || attempt != 2 {
		t.Fatalf("Resumed on the takeover = %q %q %v (attempt %d), want the first attempt's checkpoint", name, data, ok, attempt)
	}
}

// TestCheckpointValidation: a bad name or oversized data is refused before
// any store call; a zero Operation refuses too.
func TestCheckpointValidation(t *testing.T) {
	t.Parallel()
	u := newUnknownSetup(t, retrysafe.Config{})
	_, _, err := u.x.Execute(context.Background(), "s", "v", "fp", func(ctx context.Context) *retrysafe.Response {
		op := retrysafe.OperationFromContext(ctx)
		for _, tc := range []struct {
			name string
			data []byte
		}{
			{"", nil},
			{strings.Repeat("n", retrysafe.MaxCheckpointName+1), nil},
			{"tab\there", nil},
			{"naïve", nil},
			{"big", make([]byte, retrysafe.MaxCheckpointData+1)},
		} {
			if err := op.Checkpoint(ctx, tc.name, tc.data); err == nil {
				t.Errorf("Checkpoint(%q, %d bytes) succeeded", tc.name, len(tc.data))
			}
		}
		if err := op.Checkpoint(ctx, strings.Repeat("n", retrysafe.MaxCheckpointName), make([]byte, retrysafe.MaxCheckpointData)); err != nil {
			t.Errorf("Checkpoint at the limits: %v", err)
		}
		return created("ok")
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := new(retrysafe.Operation).Checkpoint(context.Background(), "x", nil); err == nil {
		t.Error("Checkpoint of a zero Operation succeeded")
	}
}

// TestCheckpointLeaseLost: a checkpoint that finds the lease taken over
// returns ErrLeaseLost and cancels the operation's context with it.
func TestCheckpointLeaseLost(t *testing.T) {
	t.Parallel()
	u := newUnknownSetup(t, retrysafe.Config{})
	_, _, err := u.x.Execute(context.Background(), "s", "lost", "fp", func(ctx context.Context) *retrysafe.Response {
		// Another claimant takes the lease over meanwhile.
		res, err := u.store.Claim(context.Background(), &retrysafe.ClaimParams{Scope: "s", Key: "lost", Fingerprint: "fp", Token: retrysafe.NewToken(), Now: u0.Add(uLease), Lease: uLease})
		if err != nil || !res.Claimed {
			t.Errorf("takeover: %+v %v", res, err)
		}
		err = retrysafe.OperationFromContext(ctx).Checkpoint(ctx, "step", nil)
		if !errors.Is(err, retrysafe.ErrLeaseLost) {
			t.Errorf("Checkpoint after a takeover: %v, want ErrLeaseLost", err)
		}
		if ctx.Err() == nil || !errors.Is(context.Cause(ctx), retrysafe.ErrLeaseLost) {
			t.Errorf("the operation's context after the lost checkpoint: %v (cause %v)", ctx.Err(), context.Cause(ctx))
		}
		return nil
	})
	if err != nil && !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatal(err)
	}
}

// TestOnUnknownBlock: under OnUnknown block a retry after the lease never
// runs the operation: 409 outcome-unknown saying it waits for a
// resolution, Retry-After the lease, outcome "blocked"; the record stays as
// it was; an operator's fenced Complete then answers every retry.
func TestOnUnknownBlock(t *testing.T) {
	t.Parallel()
	clock := newTestClock(u0)
	store := newMemory(t)
	obs := &outcomeLog{}
	var runs atomic.Int64
	srv := newServer(t, retrysafe.Config{Store: store, Lease: uLease, Now: clock.Now, Logger: quiet, OnUnknown: retrysafe.OnUnknownBlock, Observer: obs}, abandoning(&runs))
	send(t, srv.URL, http.MethodPost, "k", `{}`)
	for _, tc := range []struct {
		at    time.Duration
		retry string
	}{{time.Second, "29"}, {uLease, "30"}, {time.Hour, "30"}} {
		clock.Set(u0.Add(tc.at))
		r := send(t, srv.URL, http.MethodPost, "k", `{}`)
		wantProblem(t, r, http.StatusConflict, retrysafe.ProblemOutcomeUnknown)
		if got := r.header.Get("Retry-After"); got != tc.retry {
			t.Errorf("Retry-After of a blocked record at +%s = %q, want %s (the lease left, then the lease length)", tc.at, got, tc.retry)
		}
		if d := problemDetail(t, r); !strings.Contains(d, "until the outcome is resolved") || strings.Contains(d, "runs the operation again") {
			t.Errorf("detail %q, want it to say the key waits for a resolution", d)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("runs = %d, want 1: block never re-runs", runs.Load())
	}
	obs.mu.Lock()
	last := obs.outcomes[len(obs.outcomes)-1]
	obs.mu.Unlock()
	if last != retrysafe.OutcomeBlocked {
		t.Errorf("outcome of a blocked retry = %q, want %q", last, retrysafe.OutcomeBlocked)
	}
	rec, err := store.Get(context.Background(), &retrysafe.GetParams{Key: "k", Now: clock.Now()})
	if err != nil || rec.Attempt != 1 || !rec.Abandoned {
		t.Fatalf("record after blocked retries: %+v, %v; want attempt 1, abandoned", rec, err)
	}
	// An operator resolves it, fenced by the token it read.
	if err := store.Complete(context.Background(), &retrysafe.CompleteParams{Key: "k", Token: rec.Token, Now: clock.Now(), TTL: time.Hour, Response: created("resolved")}); err != nil {
		t.Fatal(err)
	}
	if r := send(t, srv.URL, http.MethodPost, "k", `{}`); r.status != http.StatusCreated || string(r.body) != "resolved" || r.header.Get(retrysafe.HeaderReplayed) != "true" {
		t.Fatalf("after the resolution: %d %q", r.status, r.body)
	}
}

// TestResolverDecisions: the Resolver sees the stranded record (its
// checkpoint, attempt and mark) and its decision is followed: re-run takes
// over with the checkpoint, complete stores and replays its response
// (StoreHeader applied), keep-blocked refuses.
func TestResolverDecisions(t *testing.T) {
	t.Parallel()
	var decide atomic.Value // func(*retrysafe.Record) retrysafe.Resolution
	var seen atomic.Pointer[retrysafe.Record]
	u := newUnknownSetup(t, retrysafe.Config{Resolver: func(ctx context.Context, rec *retrysafe.Record) (retrysafe.Resolution, error) {
		seen.Store(rec)
		return decide.Load().(func(*retrysafe.Record) retrysafe.Resolution)(rec), nil
	}})
	var runs atomic.Int64
	run := func(key string) (*retrysafe.Response, bool, error) {
		return u.x.Execute(context.Background(), "s", key, "fp", func(ctx context.Context) *retrysafe.Response {
			runs.Add(1)
			name, data, _ := retrysafe.OperationFromContext(ctx).Resumed()
			return created("run from " + name + ":" + string(data))
		})
	}
	for _, key := range []string{"rerun", "complete", "blocked"} {
		u.strand(t, key, "sent", []byte(key))
	}
	u.clock.Set(u0.Add(uLease))

	decide.Store(func(*retrysafe.Record) retrysafe.Resolution {
		return retrysafe.Resolution{Action: retrysafe.ResolveRerun}
	})
	resp, replayed, err := run("rerun")
	if err != nil || replayed || string(resp.Body) != "run from sent:rerun" || runs.Load() != 1 {
		t.Fatalf("re-run: %v %v %v (runs %d)", resp, replayed, err, runs.Load())
	}
	if rec := seen.Load(); rec.Key != "rerun" || rec.Attempt != 1 || !rec.Abandoned || rec.Checkpoint == nil || string(rec.Checkpoint.Data) != "rerun" {
		t.Fatalf("the Resolver saw %+v", rec)
	}
	if rec := u.record(t, "rerun"); rec.State != retrysafe.StateCompleted || rec.Attempt != 2 {
		t.Fatalf("re-run record %+v", rec)
	}

	decide.Store(func(*retrysafe.Record) retrysafe.Resolution {
		resp := created("done before")
		resp.Header.Set("Set-Cookie", "session=leak")
		return retrysafe.Resolution{Action: retrysafe.ResolveComplete, Response: resp}
	})
	for i := range 2 {
		resp, replayed, err = run("complete")
		if err != nil || !replayed || string(resp.Body) != "done before" || resp.Header.Get("Set-Cookie") != "" {
			t.Fatalf("complete, call %d: %+v %v %v", i, resp, replayed, err)
		}
	}
	if rec := u.record(t, "complete"); rec.State != retrysafe.StateCompleted || rec.Attempt != 1 || rec.Abandoned || rec.Response.Header.Get("Set-Cookie") != "" {
		t.Fatalf("completed record %+v", rec)
	}

	decide.Store(func(*retrysafe.Record) retrysafe.Resolution { return retrysafe.Resolution{} })
	_, _, err = run("blocked")
	wantBlocked(t, "keep blocked", err)
	decide.Store(func(*retrysafe.Record) retrysafe.Resolution {
		return retrysafe.Resolution{Action: retrysafe.ResolveComplete}
	})
	_, _, err = run("blocked")
	wantBlocked(t, "ResolveComplete without a response", err)
	decide.Store(func(*retrysafe.Record) retrysafe.Resolution { return retrysafe.Resolution{Action: 42} })
	_, _, err = run("blocked")
	wantBlocked(t, "an unknown action", err)
	if runs.Load() != 1 {
		t.Fatalf("runs = %d, want 1 (only the re-run)", runs.Load())
	}
}

// TestResolverFailuresKeepBlocked: a Resolver that errs, panics or hangs
// past ResolveTimeout keeps the record blocked and changes nothing in it;
// a hung Resolver's late answer is dropped; a working Resolver later
// resolves the record.
func TestResolverFailuresKeepBlocked(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	var mode atomic.Value // string
	u := newUnknownSetup(t, retrysafe.Config{ResolveTimeout: 50 * time.Millisecond, Resolver: func(ctx context.Context, rec *retrysafe.Record) (retrysafe.Resolution, error) {
		switch mode.Load().(string) {
		case "error":
			return retrysafe.Resolution{}, errors.New("upstream down")
		case "panic":
			panic("resolver bug")
		case "hang":
			<-hang // ignores ctx
			return retrysafe.Resolution{Action: retrysafe.ResolveComplete, Response: created("late")}, nil
		}
		return retrysafe.Resolution{Action: retrysafe.ResolveComplete, Response: created("resolved")}, nil
	}})
	t.Cleanup(func() { close(hang) })
	u.strand(t, "k", "sent", []byte("ch_1"))
	u.clock.Set(u0.Add(uLease))
	before := u.record(t, "k")
	var runs atomic.Int64
	run := func() (*retrysafe.Response, bool, error) {
		return u.x.Execute(context.Background(), "s", "k", "fp", func(ctx context.Context) *retrysafe.Response {
			runs.Add(1)
			return created("ran again")
		})
	}
	for _, m := range []string{"error", "panic", "hang"} {
		mode.Store(m)
		start := time.Now()
		_, _, err := run()
		wantBlocked(t, m, err)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: the retry took %s: the Resolver is not bounded", m, d)
		}
		rec := u.record(t, "k")
		if rec.State != retrysafe.StateProcessing || rec.Token != before.Token || rec.Attempt != 1 || !rec.Abandoned || rec.Checkpoint == nil || string(rec.Checkpoint.Data) != "ch_1" {
			t.Fatalf("%s: the record changed: %+v", m, rec)
		}
	}
	if runs.Load() != 0 {
		t.Fatalf("runs = %d: a failed Resolver let the operation run again", runs.Load())
	}
	mode.Store("ok")
	resp, replayed, err := run()
	if err != nil || !replayed || string(resp.Body) != "resolved" {
		t.Fatalf("a working Resolver: %+v %v %v", resp, replayed, err)
	}
}

// TestResolverRerunRace: retries racing for one stranded record, each
// told by the Resolver to re-run it: exactly one runs the operation; the
// others are refused while it runs, and get its result after.
func TestResolverRerunRace(t *testing.T) {
	t.Parallel()
	const n = 8
	var arrived sync.WaitGroup
	arrived.Add(n)
	u := newUnknownSetup(t, retrysafe.Config{ResolveTimeout: 10 * time.Second, Resolver: func(ctx context.Context, rec *retrysafe.Record) (retrysafe.Resolution, error) {
		// Every retry decides before any of them claims: they overlap.
		arrived.Done()
		arrived.Wait()
		return retrysafe.Resolution{Action: retrysafe.ResolveRerun}, nil
	}})
	u.strand(t, "k", "", nil)
	u.clock.Set(u0.Add(uLease))
	var runs atomic.Int64
	gate := make(chan struct{})
	var wg sync.WaitGroup
	var refused atomic.Int64
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, _, errs[i] = u.x.Execute(context.Background(), "s", "k", "fp", func(ctx context.Context) *retrysafe.Response {
				runs.Add(1)
				<-gate
				return created("once")
			})
			if errs[i] != nil {
				refused.Add(1)
			}
		})
	}
	// The losers answer while the winner runs.
	waitFor(t, func() bool { return refused.Load() == n-1 })
	close(gate)
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("runs = %d, want exactly 1", runs.Load())
	}
	for i, err := range errs {
		if err != nil && !errors.Is(err, retrysafe.ErrInProgress) {
			t.Errorf("retry %d: %v, want nil or ErrInProgress", i, err)
		}
	}
	if rec := u.record(t, "k"); rec.State != retrysafe.StateCompleted || rec.Attempt != 2 || string(rec.Response.Body) != "once" {
		t.Fatalf("record %+v", rec)
	}
}

// TestResolverCompleteRace: retries racing to store the Resolver's
// response: one Complete wins, the others find the record completed and
// replay the same answer; nothing runs.
func TestResolverCompleteRace(t *testing.T) {
	t.Parallel()
	const n = 8
	var calls atomic.Int64
	u := newUnknownSetup(t, retrysafe.Config{Resolver: func(ctx context.Context, rec *retrysafe.Record) (retrysafe.Resolution, error) {
		c := calls.Add(1)
		return retrysafe.Resolution{Action: retrysafe.ResolveComplete, Response: created("answer " + string(rune('0'+c)))}, nil
	}})
	u.strand(t, "k", "", nil)
	u.clock.Set(u0.Add(uLease))
	var runs atomic.Int64
	bodies := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			resp, replayed, err := u.x.Execute(context.Background(), "s", "k", "fp", func(ctx context.Context) *retrysafe.Response {
				runs.Add(1)
				return created("ran")
			})
			if err != nil || !replayed {
				t.Errorf("retry %d: %v %v", i, replayed, err)
				return
			}
			bodies[i] = string(resp.Body)
		})
	}
	close(start)
	wg.Wait()
	stored := string(u.record(t, "k").Response.Body)
	for i, b := range bodies {
		if b != stored && b != "" {
			// A retry whose own Complete won answers its response, which is
			// the stored one; every other replays the stored one.
			t.Errorf("retry %d answered %q, the store holds %q", i, b, stored)
		}
	}
	if runs.Load() != 0 {
		t.Fatalf("runs = %d, want 0", runs.Load())
	}
}

// TestResolveStranded: the completer completes, marks not done or leaves each
// stranded record as the Resolver says, fenced by the token it was given,
// and skips records that are not stranded or changed meanwhile.
func TestResolveStranded(t *testing.T) {
	t.Parallel()
	u := newUnknownSetup(t, retrysafe.Config{Resolver: func(ctx context.Context, rec *retrysafe.Record) (retrysafe.Resolution, error) {
		switch rec.Key {
		case "done":
			return retrysafe.Resolution{Action: retrysafe.ResolveComplete, Response: created("done by the completer")}, nil
		case "not-done", "changed":
			return retrysafe.Resolution{Action: retrysafe.ResolveRerun}, nil
		case "failing":
			return retrysafe.Resolution{}, errors.New("cannot tell")
		}
		return retrysafe.Resolution{}, nil
	}})
	for _, key := range []string{"done", "not-done", "unknown", "failing", "changed"} {
		u.strand(t, key, "", nil)
	}
	u.clock.Set(u0.Add(uLease - time.Second))
	u.strand(t, "live", "", nil)
	u.clock.Set(u0.Add(uLease))
	var recs []*retrysafe.Record
	for _, key := range []string{"done", "not-done", "unknown", "failing", "changed", "live"} {
		recs = append(recs, u.record(t, key))
	}
	// "changed" is taken over before the completer writes.
	if res, err := u.store.Claim(context.Background(), &retrysafe.ClaimParams{Scope: "s", Key: "changed", Fingerprint: "fp", Token: retrysafe.NewToken(), Now: u.clock.Now(), Lease: uLease}); err != nil || !res.Claimed {
		t.Fatal(res, err)
	}
	n, err := u.x.ResolveStranded(context.Background(), append(recs, nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := (retrysafe.Stranded{Completed: 1, AwaitingRetry: 1, Blocked: 2, Skipped: 3}); n != want {
		t.Errorf("ResolveStranded = %+v, want %+v", n, want)
	}
	if rec := u.record(t, "done"); rec.State != retrysafe.StateCompleted || string(rec.Response.Body) != "done by the completer" {
		t.Errorf("done: %+v", rec)
	}
	if rec := u.record(t, "not-done"); rec.State != retrysafe.StateProcessing || rec.Attempt != 1 || !rec.ResolvedNotDone() {
		t.Errorf("not-done: %+v, want it kept at attempt 1, resolved not done", rec)
	}
	for _, key := range []string{"unknown", "failing", "live"} {
		if rec := u.record(t, key); rec.State != retrysafe.StateProcessing || rec.Attempt != 1 {
			t.Errorf("%s: %+v, want it left as it was", key, rec)
		}
	}
	if rec := u.record(t, "changed"); rec.State != retrysafe.StateProcessing || rec.Attempt != 2 {
		t.Errorf("changed: %+v, want the new owner's record untouched", rec)
	}

	x, err := retrysafe.NewExecutor(retrysafe.Config{Store: u.store})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.ResolveStranded(context.Background(), recs); err == nil {
		t.Error("ResolveStranded without a Resolver succeeded")
	}
}

// TestDoUnknownOutcomes: Do has the same tools: checkpoints and Resumed
// through the Operation in fn's context, OnUnknown block, a Resolver whose
// response Do decodes, and Doer.ResolveStranded.
func TestDoUnknownOutcomes(t *testing.T) {
	t.Parallel()
	clock := newTestClock(u0)
	store := newMemory(t)
	first := func(ctx context.Context) (string, error) {
		op := retrysafe.OperationFromContext(ctx)
		if err := op.Checkpoint(ctx, "sent", []byte("msg-1")); err != nil {
			return "", err
		}
		op.Abandon()
		return "", nil
	}
	cfg := retrysafe.DoConfig{Store: store, Scope: "q", Lease: uLease, Now: clock.Now, Logger: quiet}

	// Takeover (the default): the retry resumes.
	if _, err := doWith(context.Background(), &cfg, "takeover", "fp", first); err != nil {
		t.Fatal(err)
	}
	clock.Set(u0.Add(uLease))
	got, err := doWith(context.Background(), &cfg, "takeover", "fp", func(ctx context.Context) (string, error) {
		name, data, ok := retrysafe.OperationFromContext(ctx).Resumed()
		if !ok {
			return "from scratch", nil
		}
		return name + ":" + string(data), nil
	})
	if err != nil || got != "sent:msg-1" {
		t.Fatalf("Do after a takeover = %q, %v; want it resumed", got, err)
	}

	// Block.
	clock.Set(u0)
	block := cfg
	block.OnUnknown = retrysafe.OnUnknownBlock
	if _, err := doWith(context.Background(), &block, "block", "fp", first); err != nil {
		t.Fatal(err)
	}
	clock.Set(u0.Add(uLease))
	_, err = doWith(context.Background(), &block, "block", "fp", func(context.Context) (string, error) {
		t.Error("ran under block")
		return "", nil
	})
	wantBlocked(t, "Do under block", err)

	// A Resolver that completes with an encoded result.
	resolver := cfg
	resolver.Resolver = func(ctx context.Context, rec *retrysafe.Record) (retrysafe.Resolution, error) {
		resp, err := retrysafe.ResultResponse("resolved " + string(rec.Checkpoint.Data))
		return retrysafe.Resolution{Action: retrysafe.ResolveComplete, Response: resp}, err
	}
	got, err = doWith(context.Background(), &resolver, "block", "fp", func(context.Context) (string, error) {
		t.Error("ran although the Resolver completed it")
		return "", nil
	})
	if err != nil || got != "resolved msg-1" {
		t.Fatalf("Do with a completing Resolver = %q, %v", got, err)
	}

	// The completer for Do's records.
	clock.Set(u0)
	if _, err := doWith(context.Background(), &cfg, "stranded", "fp", first); err != nil {
		t.Fatal(err)
	}
	clock.Set(u0.Add(uLease))
	rec, err := store.Get(context.Background(), &retrysafe.GetParams{Scope: "q", Key: "stranded", Now: clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := retrysafe.NewDoer(resolver)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := d.ResolveStranded(context.Background(), []*retrysafe.Record{rec}); err != nil || n.Completed != 1 {
		t.Fatalf("Doer.ResolveStranded = %+v, %v", n, err)
	}
	got, err = retrysafe.Run(context.Background(), d, "stranded", "fp", func(context.Context) (string, error) { return "ran", nil })
	if err != nil || got != "resolved msg-1" {
		t.Fatalf("Do after the completer = %q, %v", got, err)
	}
}

// TestOnUnknownConfig: an unknown policy and a negative ResolveTimeout are
// refused, naming the field.
func TestOnUnknownConfig(t *testing.T) {
	t.Parallel()
	store := newMemory(t)
	for _, tc := range []struct {
		cfg  retrysafe.Config
		want string
	}{
		{retrysafe.Config{Store: store, OnUnknown: "retry"}, "Config.OnUnknown"},
		{retrysafe.Config{Store: store, ResolveTimeout: -time.Second}, "Config.ResolveTimeout"},
	} {
		if _, err := retrysafe.NewMiddleware(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewMiddleware(%+v): %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	c, err := retrysafe.Config{Store: store}.WithDefaults()
	if err != nil || c.OnUnknown != retrysafe.OnUnknownTakeover || c.ResolveTimeout != retrysafe.DefaultResolveTimeout {
		t.Fatalf("defaults: %q %s %v", c.OnUnknown, c.ResolveTimeout, err)
	}
}

// completeDown is a store whose Complete is unavailable.
type completeDown struct{ retrysafe.Store }

func (completeDown) Complete(context.Context, *retrysafe.CompleteParams) error {
	return retrysafe.Unavailable("complete", errors.New("connection refused"))
}

// TestResolverCompleteStoreDownKeepsBlocked: when the Resolver's response
// cannot be stored, the retry is blocked, not answered store-unavailable:
// with FailOpen that would run the operation the Resolver found done.
func TestResolverCompleteStoreDownKeepsBlocked(t *testing.T) {
	t.Parallel()
	clock := newTestClock(u0)
	mem := newMemory(t)
	var runs atomic.Int64
	srv := newServer(t, retrysafe.Config{Store: completeDown{mem}, Lease: uLease, Now: clock.Now, Logger: quiet, FailOpen: true,
		Resolver: func(ctx context.Context, rec *retrysafe.Record) (retrysafe.Resolution, error) {
			return retrysafe.Resolution{Action: retrysafe.ResolveComplete, Response: created("done")}, nil
		}}, abandoning(&runs))
	send(t, srv.URL, http.MethodPost, "k", `{}`)
	clock.Set(u0.Add(uLease))
	r := send(t, srv.URL, http.MethodPost, "k", `{}`)
	wantProblem(t, r, http.StatusConflict, retrysafe.ProblemOutcomeUnknown)
	if runs.Load() != 1 {
		t.Fatalf("runs = %d, want 1: the operation ran again", runs.Load())
	}
}

// unawareStore is a store written before Abandon existed: it takes an
// Extend with Abandon for a plain renewal.
type unawareStore struct{ retrysafe.Store }

func (s unawareStore) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	q := *p
	q.Abandon = false
	return s.Store.Extend(ctx, &q)
}

// TestAbandonOnAStoreThatIgnoresIt: on a store that does not know the
// abandoned mark, abandoning must not end the lease (a renewal with no
// Lease would): a retry within the lease still runs nothing.
func TestAbandonOnAStoreThatIgnoresIt(t *testing.T) {
	t.Parallel()
	clock := newTestClock(u0)
	var runs atomic.Int64
	srv := newServer(t, retrysafe.Config{Store: unawareStore{newMemory(t)}, Lease: uLease, Now: clock.Now, Logger: quiet}, abandoning(&runs))
	send(t, srv.URL, http.MethodPost, "k", `{}`)
	clock.Set(u0.Add(time.Second))
	r := send(t, srv.URL, http.MethodPost, "k", `{}`)
	if r.status != http.StatusConflict || runs.Load() != 1 {
		t.Fatalf("retry within the lease: %d %s, runs %d; want 409 and no second run", r.status, r.body, runs.Load())
	}
}

// takesOverAlways is a store written before NoTakeover existed.
type takesOverAlways struct{ retrysafe.Store }

func (s takesOverAlways) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	q := *p
	q.NoTakeover = false
	return s.Store.Claim(ctx, &q)
}

// TestBlockOnAStoreThatTakesOver: under OnUnknown block, a store that
// takes an expired lease over anyway does not make the engine run the
// operation again.
func TestBlockOnAStoreThatTakesOver(t *testing.T) {
	t.Parallel()
	clock := newTestClock(u0)
	var runs atomic.Int64
	srv := newServer(t, retrysafe.Config{Store: takesOverAlways{newMemory(t)}, Lease: uLease, Now: clock.Now, Logger: quiet, OnUnknown: retrysafe.OnUnknownBlock}, abandoning(&runs))
	send(t, srv.URL, http.MethodPost, "k", `{}`)
	clock.Set(u0.Add(uLease))
	r := send(t, srv.URL, http.MethodPost, "k", `{}`)
	wantProblem(t, r, http.StatusConflict, retrysafe.ProblemOutcomeUnknown)
	if runs.Load() != 1 {
		t.Fatalf("runs = %d, want 1", runs.Load())
	}
}

// TestAbandonWithNotesWhy: Operation.AbandonWith writes its note as the
// record's checkpoint in the abandoning write, after the operation's code
// returned: the lease stays as claimed (a Checkpoint call would renew it),
// an earlier checkpoint is replaced, the attempt that takes the record
// over reads the note with Resumed, and a later Abandon drops the note. An
// invalid note is refused and leaves the disposition alone.
func TestAbandonWithNotesWhy(t *testing.T) {
	t.Parallel()
	u := newUnknownSetup(t, retrysafe.Config{})
	run := func(key string, fn func(ctx context.Context, op *retrysafe.Operation)) {
		t.Helper()
		if _, _, err := u.x.Execute(context.Background(), "s", key, "fp", func(ctx context.Context) *retrysafe.Response {
			fn(ctx, retrysafe.OperationFromContext(ctx))
			return nil
		}); err != nil {
			t.Fatalf("attempt of %q: %v", key, err)
		}
	}
	run("noted", func(ctx context.Context, op *retrysafe.Operation) {
		if err := op.Checkpoint(ctx, "request-sent", []byte("r1")); err != nil {
			t.Error(err)
		}
		u.clock.Set(u0.Add(5 * time.Second))
		if err := op.AbandonWith("upstream timeout", []byte("deadline exceeded")); err != nil {
			t.Error(err)
		}
		if op.Disposition() != retrysafe.DispositionAbandon {
			t.Errorf("disposition %v after AbandonWith", op.Disposition())
		}
	})
	rec := u.record(t, "noted")
	if !rec.Abandoned || rec.Checkpoint == nil || rec.Checkpoint.Name != "upstream timeout" || string(rec.Checkpoint.Data) != "deadline exceeded" ||
		!rec.Checkpoint.At.Equal(u0.Add(5*time.Second)) {
		t.Fatalf("record after AbandonWith: abandoned %v, checkpoint %+v; want abandoned with the note", rec.Abandoned, rec.Checkpoint)
	}
	if !rec.LeaseUntil.Equal(u0.Add(uLease)) {
		t.Errorf("LeaseUntil = %s, want the claim's %s: the note must not renew the lease", rec.LeaseUntil, u0.Add(uLease))
	}
	u.clock.Set(u0.Add(uLease))
	run("noted", func(ctx context.Context, op *retrysafe.Operation) {
		name, data, ok := op.Resumed()
		if !ok || op.Attempt() != 2 || name != "upstream timeout" || string(data) != "deadline exceeded" {
			t.Errorf("takeover: attempt %d, Resumed = %q, %q, %v; want attempt 2 reading the note", op.Attempt(), name, data, ok)
		}
		op.Release()
	})

	u.clock.Set(u0)
	run("dropped", func(ctx context.Context, op *retrysafe.Operation) {
		if err := op.AbandonWith("first thought", nil); err != nil {
			t.Error(err)
		}
		op.Abandon()
	})
	if rec := u.record(t, "dropped"); !rec.Abandoned || rec.Checkpoint != nil {
		t.Errorf("AbandonWith then Abandon: abandoned %v, checkpoint %+v; want abandoned without a note", rec.Abandoned, rec.Checkpoint)
	}

	run("invalid", func(ctx context.Context, op *retrysafe.Operation) {
		for name, data := range map[string][]byte{"": nil, "bad\nname": nil, "big": make([]byte, retrysafe.MaxCheckpointData+1)} {
			if err := op.AbandonWith(name, data); err == nil {
				t.Errorf("AbandonWith(%q, %d bytes) = nil, want an error", name, len(data))
			}
		}
		if op.Disposition() != retrysafe.DispositionComplete {
			t.Errorf("disposition %v after refused notes, want DispositionComplete", op.Disposition())
		}
	})
	if _, err := u.store.Get(context.Background(), &retrysafe.GetParams{Scope: "s", Key: "invalid", Now: u0}); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Errorf("after refused notes and a nil result: Get = %v, want ErrNotFound (released)", err)
	}
}
