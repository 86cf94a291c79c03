package retrysafe_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// testClock is a clock the test moves by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock(t time.Time) *testClock { return &testClock{now: t} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// abandoning is a handler whose first run ends without a result (as the
// gateway does when the upstream's answer is lost): the record stays
// processing until its lease runs out. Later runs answer 201.
func abandoning(runs *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			retrysafe.OperationFromContext(r.Context()).Abandon()
			w.WriteHeader(http.StatusGatewayTimeout)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("done"))
	})
}

// unmarked is a store that drops the abandoned mark (Extend with Abandon
// does nothing): its records look like those of an owner that died
// without a word, so only the stale lease tells that it stopped.
type unmarked struct{ retrysafe.Store }

func (s unmarked) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	if p.Abandon {
		return nil
	}
	return s.Store.Extend(ctx, p)
}

func problemDetail(t *testing.T, r result) string {
	t.Helper()
	var p retrysafe.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	return p.Detail
}

// TestConflictAfterUnknownOutcome: once the owner of a record has stopped
// renewing its lease (more than half the lease since the last renewal), a
// retry gets 409 outcome-unknown with Retry-After = the time left on the
// lease, not "still being processed" with Retry-After: 1. A record whose
// owner renews stays request-in-progress.
func TestConflictAfterUnknownOutcome(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 300_000_000, time.UTC)
	clock := newTestClock(t0)
	store := unmarked{newMemory(t)} // an owner that died: no abandoned mark
	var runs atomic.Int64
	srv := newServer(t, retrysafe.Config{Store: store, Lease: 30 * time.Second, Now: clock.Now}, abandoning(&runs))

	if r := send(t, srv.URL, http.MethodPost, "k", `{}`); r.status != http.StatusGatewayTimeout {
		t.Fatalf("first attempt: %d %s, want the handler's 504", r.status, r.body)
	}

	// 5s later the owner could still be renewing: in progress, retry soon.
	clock.Set(t0.Add(5 * time.Second))
	r := send(t, srv.URL, http.MethodPost, "k", `{}`)
	wantProblem(t, r, http.StatusConflict, retrysafe.ProblemInProgress)
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After of a live owner = %q, want 1", got)
	}

	// 16.5s after the last renewal (more than half of the 30s lease): the
	// owner stopped; 13.5s of the lease are left.
	clock.Set(t0.Add(16500 * time.Millisecond))
	r = send(t, srv.URL, http.MethodPost, "k", `{}`)
	wantProblem(t, r, http.StatusConflict, retrysafe.ProblemOutcomeUnknown)
	if got := r.header.Get("Retry-After"); got != "14" {
		t.Errorf("Retry-After after an unknown outcome = %q, want 14 (the lease left, rounded up)", got)
	}
	detail := problemDetail(t, r)
	for _, want := range []string{"outcome is unknown", "2026-01-01T00:00:31Z", "runs the operation again", "Check the resource's state"} {
		if !strings.Contains(detail, want) {
			t.Errorf("detail %q does not say %q", detail, want)
		}
	}

	// Near the end of the lease: Retry-After is at least one second.
	clock.Set(t0.Add(30*time.Second - time.Millisecond))
	r = send(t, srv.URL, http.MethodPost, "k", `{}`)
	wantProblem(t, r, http.StatusConflict, retrysafe.ProblemOutcomeUnknown)
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After 1ms before the lease ends = %q, want 1", got)
	}

	// After the lease the retry runs again (attempt 2) and is stored.
	clock.Set(t0.Add(30 * time.Second))
	if r := send(t, srv.URL, http.MethodPost, "k", `{}`); r.status != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("retry after the lease: %d %s, runs %d; want 201 from a second run", r.status, r.body, runs.Load())
	}

}

// TestConflictWhileOwnerRenews: a record claimed long ago whose owner
// renewed its lease recently is in progress, not of unknown outcome.
func TestConflictWhileOwnerRenews(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newTestClock(t0)
	store := newMemory(t)
	gate := make(chan struct{})
	entered := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-gate
		w.WriteHeader(http.StatusCreated)
	})
	srv := newServer(t, retrysafe.Config{Store: store, Lease: 30 * time.Second, Now: clock.Now}, h)
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release) // before the server closes, if the test fails early
	first := make(chan result, 1)
	go func() { first <- send(t, srv.URL, http.MethodPost, "renewed", `{}`) }()
	<-entered

	// A heartbeat 20s after the claim (the test plays the owner's).
	rec, err := store.Get(context.Background(), &retrysafe.GetParams{Key: "renewed", Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Extend(context.Background(), &retrysafe.ExtendParams{
		Key: "renewed", Token: rec.Token, Now: t0.Add(20 * time.Second), Lease: 30 * time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	// 30s after the claim, 10s after the renewal: in progress.
	clock.Set(t0.Add(30 * time.Second))
	r := send(t, srv.URL, http.MethodPost, "renewed", `{}`)
	wantProblem(t, r, http.StatusConflict, retrysafe.ProblemInProgress)
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After of a renewing owner = %q, want 1", got)
	}
	// 36s after the claim, 16s after the renewal: the owner stopped.
	clock.Set(t0.Add(36 * time.Second))
	r = send(t, srv.URL, http.MethodPost, "renewed", `{}`)
	wantProblem(t, r, http.StatusConflict, retrysafe.ProblemOutcomeUnknown)
	if got := r.header.Get("Retry-After"); got != "14" {
		t.Errorf("Retry-After = %q, want 14", got)
	}
	release()
	if r := <-first; r.status != http.StatusCreated {
		t.Fatalf("first request: %d %s", r.status, r.body)
	}
}

// TestWaitModeTimeoutAfterUnknownOutcome: in wait mode the 409 at the end
// of the wait says the same as in conflict mode.
func TestWaitModeTimeoutAfterUnknownOutcome(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newTestClock(t0)
	var runs atomic.Int64
	srv := newServer(t, retrysafe.Config{
		Lease: 30 * time.Second, Now: clock.Now,
		InFlight: retrysafe.InFlightWait, WaitTimeout: 50 * time.Millisecond,
	}, abandoning(&runs))
	send(t, srv.URL, http.MethodPost, "k", `{}`)
	clock.Set(t0.Add(20 * time.Second))
	r := send(t, srv.URL, http.MethodPost, "k", `{}`)
	wantProblem(t, r, http.StatusConflict, retrysafe.ProblemOutcomeUnknown)
	if got := r.header.Get("Retry-After"); got != "10" {
		t.Errorf("Retry-After = %q, want 10", got)
	}
}

// TestDoInProgressErrorCarriesTheLease: Do's *InProgressError says when the
// lease ends and whether the outcome is unknown.
func TestDoInProgressErrorCarriesTheLease(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newTestClock(t0)
	store := newMemory(t)
	fp := "fp"
	if _, err := store.Claim(context.Background(), &retrysafe.ClaimParams{
		Scope: "s", Key: "job-1", Fingerprint: fp, Token: retrysafe.NewToken(), Now: t0, Lease: time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	cfg := &retrysafe.DoConfig{Store: store, Scope: "s", Lease: time.Minute, Now: clock.Now, InFlight: retrysafe.InFlightConflict}
	for _, tc := range []struct {
		at      time.Duration
		unknown bool
		retry   time.Duration
	}{{10 * time.Second, false, time.Second}, {40 * time.Second, true, 20 * time.Second}} {
		clock.Set(t0.Add(tc.at))
		_, err := doWith(context.Background(), cfg, "job-1", fp, func(context.Context) (int, error) { return 1, nil })
		var ip *retrysafe.InProgressError
		if !errors.As(err, &ip) || !errors.Is(err, retrysafe.ErrInProgress) {
			t.Fatalf("at +%s: err = %v, want *InProgressError", tc.at, err)
		}
		if ip.OutcomeUnknown != tc.unknown || ip.RetryAfter != tc.retry || !ip.LeaseUntil.Equal(t0.Add(time.Minute)) || ip.Attempt != 1 {
			t.Errorf("at +%s: %+v, want OutcomeUnknown %v, RetryAfter %s, LeaseUntil +1m, attempt 1", tc.at, ip, tc.unknown, tc.retry)
		}
	}
}

// noUpdatedAt is a store that keeps no UpdatedAt (as a third-party store
// might): its records give no evidence that the owner stopped.
type noUpdatedAt struct{ retrysafe.Store }

func (s noUpdatedAt) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, p)
	if err == nil && res.Record != nil {
		res.Record.UpdatedAt = time.Time{}
	}
	return res, err
}

// TestConflictWithoutUpdatedAt: without UpdatedAt the 409 is the usual
// request-in-progress, never a guessed outcome-unknown.
func TestConflictWithoutUpdatedAt(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newTestClock(t0)
	var runs atomic.Int64
	srv := newServer(t, retrysafe.Config{Store: noUpdatedAt{unmarked{newMemory(t)}}, Lease: 30 * time.Second, Now: clock.Now}, abandoning(&runs))
	send(t, srv.URL, http.MethodPost, "k", `{}`)
	clock.Set(t0.Add(25 * time.Second))
	r := send(t, srv.URL, http.MethodPost, "k", `{}`)
	wantProblem(t, r, http.StatusConflict, retrysafe.ProblemInProgress)
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
}
