package retrysafe_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// watchedGets is a store that counts Get calls (a waiter's re-reads) and
// runs onGet before each one.
type watchedGets struct {
	retrysafe.Store
	gets  atomic.Int64
	onGet func(n int64)
}

func (s *watchedGets) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	n := s.gets.Add(1)
	if s.onGet != nil {
		s.onGet(n)
	}
	return s.Store.Get(ctx, p)
}

// TestWaiterNeverTakesOver: in wait mode a duplicate that waits on a
// record whose lease runs out during the wait answers 409
// outcome-unknown, with the Retry-After the conflict mode would give at
// that moment; it never claims the record and runs the handler again.
func TestWaiterNeverTakesOver(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newTestClock(t0)
	store := &watchedGets{Store: unmarked{newMemory(t)}} // a dead owner: no abandoned mark
	// The waiter's first re-read finds the lease run out.
	store.onGet = func(int64) { clock.Set(t0.Add(31 * time.Second)) }
	var runs atomic.Int64
	srv := newServer(t, retrysafe.Config{
		Store: store, Lease: 30 * time.Second, Now: clock.Now,
		InFlight: retrysafe.InFlightWait, WaitTimeout: 10 * time.Second,
	}, abandoning(&runs))
	send(t, srv.URL, http.MethodPost, "k", `{}`) // the attempt whose outcome is unknown

	clock.Set(t0.Add(5 * time.Second)) // the owner could still be renewing: wait
	r := send(t, srv.URL, http.MethodPost, "k", `{}`)
	wantProblem(t, r, http.StatusConflict, retrysafe.ProblemOutcomeUnknown)
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1 (the lease has run out)", got)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1: the waiter took the record over", n)
	}
	if store.gets.Load() == 0 {
		t.Fatal("the duplicate did not wait")
	}
	// A request that arrives after the lease takes over.
	r = send(t, srv.URL, http.MethodPost, "k", `{}`)
	if r.status != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("request after the lease: %d %s, runs %d; want the takeover's 201", r.status, r.body, runs.Load())
	}
}

// TestWaitModeUnknownOutcomeAnswersAtOnce: a duplicate of a record whose
// owner stopped renewing gets 409 outcome-unknown without waiting.
func TestWaitModeUnknownOutcomeAnswersAtOnce(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newTestClock(t0)
	store := &watchedGets{Store: unmarked{newMemory(t)}}
	var runs atomic.Int64
	srv := newServer(t, retrysafe.Config{
		Store: store, Lease: 30 * time.Second, Now: clock.Now,
		InFlight: retrysafe.InFlightWait, WaitTimeout: 200 * time.Millisecond,
	}, abandoning(&runs))
	send(t, srv.URL, http.MethodPost, "k", `{}`)
	clock.Set(t0.Add(20 * time.Second))
	r := send(t, srv.URL, http.MethodPost, "k", `{}`)
	wantProblem(t, r, http.StatusConflict, retrysafe.ProblemOutcomeUnknown)
	if got := r.header.Get("Retry-After"); got != "10" {
		t.Errorf("Retry-After = %q, want 10", got)
	}
	if n := store.gets.Load(); n != 0 {
		t.Fatalf("the duplicate re-read the record %d times: it waited", n)
	}
}

// TestWaiterMayClaimAReleasedRecord: a record released while a duplicate
// waits (nothing ran) is claimed by the waiter, which runs the handler.
func TestWaiterMayClaimAReleasedRecord(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	entered, releaseNow := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			close(entered)
			<-releaseNow
			retrysafe.OperationFromContext(r.Context()).Release()
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	store := &watchedGets{Store: newMemory(t)}
	srv := newServer(t, retrysafe.Config{Store: store, InFlight: retrysafe.InFlightWait, WaitTimeout: 10 * time.Second}, h)
	first := make(chan result, 1)
	go func() { first <- send(t, srv.URL, http.MethodPost, "k", `{}`) }()
	<-entered
	// The original releases the record while the duplicate waits.
	store.onGet = func(n int64) {
		if n == 1 {
			close(releaseNow)
		}
	}
	r := send(t, srv.URL, http.MethodPost, "k", `{}`)
	if r.status != http.StatusCreated || r.header.Get(retrysafe.HeaderReplayed) != "" || runs.Load() != 2 {
		t.Fatalf("waiter after a release: %d %s replayed=%q runs %d; want its own 201", r.status, r.body, r.header.Get(retrysafe.HeaderReplayed), runs.Load())
	}
	if f := <-first; f.status != http.StatusServiceUnavailable {
		t.Fatalf("original: %d", f.status)
	}
}

// TestDoWaiterNeverTakesOver: Do in its default wait mode never runs fn
// for a key whose lease ran out while it waited, nor waits on an unknown
// outcome.
func TestDoWaiterNeverTakesOver(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newTestClock(t0)
	store := &watchedGets{Store: newMemory(t)}
	if _, err := store.Claim(context.Background(), &retrysafe.ClaimParams{
		Scope: "s", Key: "job", Fingerprint: "fp", Token: retrysafe.NewToken(), Now: t0, Lease: 30 * time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	cfg := &retrysafe.DoConfig{Store: store, Scope: "s", Lease: 30 * time.Second, Now: clock.Now, WaitTimeout: 10 * time.Second}
	var runs atomic.Int64
	fn := func(context.Context) (int, error) { runs.Add(1); return 1, nil }

	// Unknown outcome on arrival: answered at once, no wait.
	clock.Set(t0.Add(20 * time.Second))
	_, err := doWith(context.Background(), cfg, "job", "fp", fn)
	var ip *retrysafe.InProgressError
	if !errors.As(err, &ip) || !ip.OutcomeUnknown || ip.RetryAfter != 10*time.Second {
		t.Fatalf("err = %v, want an outcome-unknown *InProgressError with RetryAfter 10s", err)
	}
	if n := store.gets.Load(); n != 0 {
		t.Fatalf("Do re-read the record %d times: it waited", n)
	}

	// Live on arrival, lease run out during the wait: no takeover.
	clock.Set(t0.Add(5 * time.Second))
	store.onGet = func(int64) { clock.Set(t0.Add(31 * time.Second)) }
	_, err = doWith(context.Background(), cfg, "job", "fp", fn)
	if !errors.As(err, &ip) || !ip.OutcomeUnknown || ip.RetryAfter != time.Second {
		t.Fatalf("err = %v, want an outcome-unknown *InProgressError with RetryAfter 1s", err)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("fn ran %d times: the waiter took the key over", n)
	}
	// A call that arrives after the lease takes over.
	store.onGet = nil
	if v, err := doWith(context.Background(), cfg, "job", "fp", fn); err != nil || v != 1 || runs.Load() != 1 {
		t.Fatalf("after the lease: %d, %v, runs %d; want the takeover's run", v, err, runs.Load())
	}
}

// vanishingOnce is a store whose first Get says the record is gone (as
// if the owner had released it) and moves the clock past the lease: the
// waiter's claim that follows takes over the record's expired lease.
type vanishingOnce struct {
	retrysafe.Store
	gone atomic.Bool
	then func()
}

func (s *vanishingOnce) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	if s.gone.CompareAndSwap(false, true) {
		s.then()
		return nil, retrysafe.ErrNotFound
	}
	return s.Store.Get(ctx, p)
}

// TestWaiterClaimThatTakesOverRunsNothing: a waiter whose claim after a
// release happens to take over an expired lease (another request claimed
// the key in between, and its lease ran out) runs nothing.
func TestWaiterClaimThatTakesOverRunsNothing(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newTestClock(t0)
	store := &vanishingOnce{Store: newMemory(t), then: func() { clock.Set(t0.Add(31 * time.Second)) }}
	if _, err := store.Claim(context.Background(), &retrysafe.ClaimParams{
		Scope: "s", Key: "job", Fingerprint: "fp", Token: retrysafe.NewToken(), Now: t0, Lease: 30 * time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	clock.Set(t0.Add(time.Second))
	var runs atomic.Int64
	cfg := &retrysafe.DoConfig{Store: store, Scope: "s", Lease: 30 * time.Second, Now: clock.Now, WaitTimeout: 10 * time.Second}
	_, err := doWith(context.Background(), cfg, "job", "fp", func(context.Context) (int, error) { runs.Add(1); return 1, nil })
	var ip *retrysafe.InProgressError
	if !errors.As(err, &ip) || !ip.OutcomeUnknown {
		t.Fatalf("err = %v, want an outcome-unknown *InProgressError", err)
	}
	if runs.Load() != 0 {
		t.Fatal("the waiter ran a takeover")
	}
}
