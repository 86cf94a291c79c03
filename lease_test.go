package retrysafe_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// extendOutage wraps a store whose lease renewals fail while down is set,
// as when the store is briefly unreachable for the heartbeats only.
type extendOutage struct {
	retrysafe.Store
	down atomic.Bool
}

func (s *extendOutage) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	if s.down.Load() {
		return retrysafe.Unavailable("extend", errors.New("connection refused"))
	}
	return s.Store.Extend(ctx, p)
}

// TestLeaseLostWhileRunning: the heartbeats fail, the lease runs out and a
// duplicate takes the record over (the documented gap: the operation runs
// twice). When the first owner's heartbeat reaches the store again it learns
// the lease is lost: its context is cancelled with ErrLeaseLost, and its
// completion is fenced, so the record keeps the new owner's result.
func TestLeaseLostWhileRunning(t *testing.T) {
	t.Parallel()
	store := &extendOutage{Store: newMemory(t)}
	store.down.Store(true)
	var runs atomic.Int64
	firstCause := make(chan error, 1)
	testDone := make(chan struct{}) // ends a handler the test gave up on
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		if n == 1 {
			select {
			case <-r.Context().Done():
			case <-testDone:
			}
			firstCause <- context.Cause(r.Context())
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "run %d", n)
	})
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store, Lease: 90 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(h))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(testDone) }) // runs before srv.Close

	first := make(chan result, 1)
	go func() { first <- send(t, srv.URL, http.MethodPost, "k", "{}") }()
	waitFor(t, func() bool { return runs.Load() == 1 })

	var second result
	waitFor(t, func() bool { // 409 until the unrenewed lease runs out, then a takeover
		second = send(t, srv.URL, http.MethodPost, "k", "{}")
		return second.status != http.StatusConflict
	})
	if second.status != http.StatusCreated || string(second.body) != "run 2" {
		t.Fatalf("takeover: %d %q", second.status, second.body)
	}

	store.down.Store(false) // the first owner's next heartbeat gets through
	select {
	case cause := <-firstCause:
		if !errors.Is(cause, retrysafe.ErrLeaseLost) {
			t.Fatalf("first owner's context cause = %v, want ErrLeaseLost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first owner was never told that its lease was lost")
	}
	if a := <-first; string(a.body) != "run 1" {
		t.Fatalf("first caller got %d %q, want its own answer", a.status, a.body)
	}
	replay := send(t, srv.URL, http.MethodPost, "k", "{}")
	if replay.header.Get(retrysafe.HeaderReplayed) != "true" || string(replay.body) != "run 2" {
		t.Fatalf("replay: %d %q replayed=%q; the fenced first owner must not overwrite the new owner's result",
			replay.status, replay.body, replay.header.Get(retrysafe.HeaderReplayed))
	}
	if runs.Load() != 2 {
		t.Fatalf("runs = %d, want 2", runs.Load())
	}
}

// completeOutage fails the next n completions, as a store that drops out
// just as the handler finishes.
type completeOutage struct {
	retrysafe.Store
	failures atomic.Int64
}

func (s *completeOutage) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	if s.failures.Add(-1) >= 0 {
		return retrysafe.Unavailable("complete", errors.New("connection reset"))
	}
	return s.Store.Complete(ctx, p)
}

// TestCompletionRetriesAndItsLimit: a completion that fails briefly is
// retried and the result is stored; one that keeps failing leaves the
// record processing until its lease runs out (the caller still gets the
// real answer), after which a retry runs again — as docs/guarantees.md says.
func TestCompletionRetriesAndItsLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		failures int64
		wantRuns int64
	}{
		{"transient failure is retried", 2, 1},
		{"lasting failure leaves the key to its lease", 100, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := &completeOutage{Store: newMemory(t)}
			store.failures.Store(tc.failures)
			var runs atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "run %d", runs.Add(1))
			})
			mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store, Lease: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(mw(h))
			t.Cleanup(srv.Close)
			if first := send(t, srv.URL, http.MethodPost, "k", "{}"); first.status != http.StatusCreated || string(first.body) != "run 1" {
				t.Fatalf("first: %d %q", first.status, first.body)
			}
			store.failures.Store(0)
			var again result
			waitFor(t, func() bool {
				again = send(t, srv.URL, http.MethodPost, "k", "{}")
				return again.status != http.StatusConflict
			})
			if runs.Load() != tc.wantRuns || again.status != http.StatusCreated {
				t.Fatalf("runs = %d (want %d), retry answered %d %q", runs.Load(), tc.wantRuns, again.status, again.body)
			}
			if tc.wantRuns == 1 && again.header.Get(retrysafe.HeaderReplayed) != "true" {
				t.Fatal("the stored result was not replayed")
			}
		})
	}
}

// countingExtends counts lease renewals.
type countingExtends struct {
	retrysafe.Store
	extends atomic.Int64
}

func (s *countingExtends) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	s.extends.Add(1)
	return s.Store.Extend(ctx, p)
}

// TestLeaseRenewedWhileRunning: a handler that runs for many leases keeps
// its record: the heartbeat renews the lease again and again, so a
// duplicate sent after several leases still gets 409 instead of taking the
// record over, and the result is stored once the handler returns.
func TestLeaseRenewedWhileRunning(t *testing.T) {
	t.Parallel()
	const lease = 150 * time.Millisecond
	store := &countingExtends{Store: newMemory(t)}
	release := make(chan struct{})
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		if n == 1 {
			<-release
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "run %d", n)
	})
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(h))
	t.Cleanup(srv.Close)
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before srv.Close

	first := make(chan result, 1)
	go func() { first <- send(t, srv.URL, http.MethodPost, "k", "{}") }()
	waitFor(t, func() bool { return runs.Load() == 1 })
	// Several leases pass while the handler runs: without renewals the
	// lease would have run out and a duplicate would take the record over.
	waitFor(t, func() bool { return store.extends.Load() >= 5 })
	if dup := send(t, srv.URL, http.MethodPost, "k", "{}"); dup.status != http.StatusConflict {
		t.Fatalf("duplicate while the original runs: %d %q, want 409", dup.status, dup.body)
	}
	releaseOnce.Do(func() { close(release) })
	if a := <-first; a.status != http.StatusCreated || string(a.body) != "run 1" {
		t.Fatalf("original: %d %q", a.status, a.body)
	}
	replay := send(t, srv.URL, http.MethodPost, "k", "{}")
	if replay.header.Get(retrysafe.HeaderReplayed) != "true" || string(replay.body) != "run 1" || runs.Load() != 1 {
		t.Fatalf("replay: %d %q, runs = %d", replay.status, replay.body, runs.Load())
	}
}
