package retrysafelambda

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

type order struct {
	OrderID string `json:"orderId"`
	Amount  int    `json:"amount"`
	SentAt  string `json:"sentAt,omitempty"`
}

type receipt struct {
	Charge string `json:"charge"`
	Run    int64  `json:"run"`
}

func event(t *testing.T, o order) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFuncConcurrentDuplicates invokes one wrapped handler with one event
// from many goroutines at once, the first invocation held until every
// other has reached the store: exactly one effect, and every invocation
// gets its result (wait mode) or an in-progress error (conflict mode).
func TestFuncConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	for _, mode := range []retrysafe.InFlightMode{retrysafe.InFlightWait, retrysafe.InFlightConflict} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			const n = 20
			store := newCounting(t)
			var effects atomic.Int64
			h, err := Func(Config{Store: store, Key: "/orderId", InFlight: mode, WaitTimeout: 20 * time.Second},
				func(ctx context.Context, o order) (receipt, error) {
					run := effects.Add(1)
					// Hold the first run until every invocation has made its claim.
					for store.claims.Load() < n {
						select {
						case <-ctx.Done():
							return receipt{}, ctx.Err()
						case <-time.After(time.Millisecond):
						}
					}
					return receipt{Charge: "ch_" + o.OrderID, Run: run}, nil
				})
			if err != nil {
				t.Fatal(err)
			}
			ev := event(t, order{OrderID: "o-1", Amount: 100})
			start := make(chan struct{})
			var wg sync.WaitGroup
			results := make([]receipt, n)
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					<-start
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					results[i], errs[i] = h(ctx, ev)
				})
			}
			close(start)
			wg.Wait()
			if got := effects.Load(); got != 1 {
				t.Fatalf("handler ran %d times, want 1", got)
			}
			var ok, inProgress int
			for i := range n {
				switch {
				case errs[i] == nil:
					ok++
					if results[i] != (receipt{Charge: "ch_o-1", Run: 1}) {
						t.Errorf("invocation %d got %+v", i, results[i])
					}
				case errors.Is(errs[i], retrysafe.ErrInProgress):
					inProgress++
				default:
					t.Errorf("invocation %d: %v", i, errs[i])
				}
			}
			if mode == retrysafe.InFlightWait && ok != n {
				t.Errorf("wait mode: %d of %d invocations got the result (%d in progress)", ok, n, inProgress)
			}
			if mode == retrysafe.InFlightConflict && (ok != 1 || inProgress != n-1) {
				t.Errorf("conflict mode: %d results, %d in progress; want 1 and %d", ok, inProgress, n-1)
			}
		})
	}
}

// TestFuncTimeoutThenRetry: an invocation that times out mid-operation
// (its handler gives up when the deadline passes) leaves an abandoned
// record whose lease ends by the deadline plus the grace. A retry before
// that gets an outcome-unknown error and runs nothing; the retry after it
// takes the record over as attempt 2, and later ones replay its result.
func TestFuncTimeoutThenRetry(t *testing.T) {
	t.Parallel()
	store := newCounting(t)
	const grace = 200 * time.Millisecond
	var effects atomic.Int64
	var attempts []int
	var mu sync.Mutex
	h, err := Func(Config{Store: store, Key: "/orderId", DeadlineGrace: grace},
		func(ctx context.Context, o order) (receipt, error) {
			run := effects.Add(1)
			mu.Lock()
			attempts = append(attempts, retrysafe.OperationFromContext(ctx).Attempt())
			mu.Unlock()
			if run == 1 {
				<-ctx.Done() // the side effect's answer never comes in time
				return receipt{}, ctx.Err()
			}
			return receipt{Charge: "ch_1", Run: run}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	ev := event(t, order{OrderID: "o-2", Amount: 5})

	deadline := time.Now().Add(300 * time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	_, err = h(ctx, ev)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timed-out invocation: err %v, want the deadline's", err)
	}
	rec := record(t, store, "", "o-2")
	if rec == nil || rec.State != retrysafe.StateProcessing || !rec.Abandoned {
		t.Fatalf("after the timeout the record is %+v; want processing, abandoned", rec)
	}
	if limit := deadline.Round(0).Add(grace); rec.LeaseUntil.Round(0).After(limit) {
		t.Fatalf("lease until %v, past the deadline plus grace %v", rec.LeaseUntil, limit)
	}

	retry := func() (receipt, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return h(ctx, ev)
	}
	if time.Now().Before(rec.LeaseUntil) {
		_, err := retry()
		var ip *retrysafe.InProgressError
		if time.Now().Before(rec.LeaseUntil) && (!errors.As(err, &ip) || !ip.OutcomeUnknown) {
			t.Fatalf("retry within the lease: err %v, want an outcome-unknown *InProgressError", err)
		}
	}
	time.Sleep(time.Until(rec.LeaseUntil) + 10*time.Millisecond)
	got, err := retry()
	if err != nil || got != (receipt{Charge: "ch_1", Run: 2}) {
		t.Fatalf("retry after the lease: %+v, %v", got, err)
	}
	if got, err := retry(); err != nil || got.Run != 2 {
		t.Fatalf("later retry: %+v, %v; want the stored result of run 2", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 2 {
		t.Fatalf("attempts %v, want [1 2]", attempts)
	}
}

// TestFuncKilledAtDeadline: an invocation whose handler never returns
// (Lambda froze or stopped the environment at its timeout) keeps no
// lease past its deadline plus the grace, although its process here
// still renews the lease: a retry then takes it over.
func TestFuncKilledAtDeadline(t *testing.T) {
	t.Parallel()
	store := newCounting(t)
	const grace = 100 * time.Millisecond
	release := make(chan struct{})
	defer close(release)
	var effects atomic.Int64
	// A lease of 300ms is renewed every 100ms while the first run hangs.
	h, err := Func(Config{Store: store, Key: "/orderId", Lease: 300 * time.Millisecond, DeadlineGrace: grace},
		func(ctx context.Context, o order) (receipt, error) {
			if effects.Add(1) == 1 {
				<-release // ignores its context: never returns in time
				return receipt{}, errors.New("too late")
			}
			return receipt{Charge: "ch_k", Run: 2}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	ev := event(t, order{OrderID: "o-k", Amount: 1})
	deadline := time.Now().Add(200 * time.Millisecond)
	go func() {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		_, _ = h(ctx, ev)
	}()
	limit := deadline.Round(0).Add(grace)
	for effects.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// While it hangs, heartbeats run; none moves the lease past the limit.
	for time.Now().Before(limit.Add(200 * time.Millisecond)) {
		if rec := record(t, store, "", "o-k"); rec != nil && rec.State == retrysafe.StateProcessing && rec.LeaseUntil.Round(0).After(limit) {
			t.Fatalf("lease until %v, past the deadline plus grace %v", rec.LeaseUntil, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := h(ctx, ev)
	if err != nil || got.Run != 2 {
		t.Fatalf("retry after the dead invocation's deadline: %+v, %v", got, err)
	}
	if rec := record(t, store, "", "o-k"); rec == nil || rec.State != retrysafe.StateCompleted || rec.Attempt != 2 {
		t.Fatalf("record after the retry: %+v; want completed by attempt 2", rec)
	}
}

// TestDeadlineTrap is the Powertools #4759 trap: an invocation with no
// time left (a deadline already passed, exactly now, or the zero Unix
// time a runtime could hand out) claims nothing, runs nothing and leaves
// the key as it was; one without any deadline gets a finite lease.
func TestDeadlineTrap(t *testing.T) {
	t.Parallel()
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := map[string]struct {
		deadline time.Time
		now      func() time.Time
	}{
		"passed":         {deadline: time.Now().Add(-time.Second)},
		"exactly now":    {deadline: fixed, now: func() time.Time { return fixed }},
		"unix zero":      {deadline: time.UnixMilli(0)},
		"zero time.Time": {deadline: time.Time{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := newCounting(t)
			ran := false
			h, err := Func(Config{Store: store, Key: "/orderId", Now: tc.now}, func(ctx context.Context, o order) (receipt, error) {
				ran = true
				return receipt{}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithDeadline(context.Background(), tc.deadline)
			defer cancel()
			if _, err := h(ctx, event(t, order{OrderID: "o-3"})); !errors.Is(err, ErrNoTimeLeft) {
				t.Fatalf("err %v, want ErrNoTimeLeft", err)
			}
			if ran || store.claims.Load() != 0 {
				t.Fatalf("ran %v, %d claims; want nothing", ran, store.claims.Load())
			}
			if rec := record(t, store, "", "o-3"); rec != nil {
				t.Fatalf("record %+v left behind", rec)
			}
		})
	}

	t.Run("no deadline", func(t *testing.T) {
		t.Parallel()
		store := newCounting(t)
		const lease = 2 * time.Second
		seen := make(chan *retrysafe.Record, 1)
		h, err := Func(Config{Store: store, Key: "/orderId", Lease: lease}, func(ctx context.Context, o order) (receipt, error) {
			seen <- record(t, store, "", "o-4")
			return receipt{Charge: "ch"}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h(context.Background(), event(t, order{OrderID: "o-4"})); err != nil {
			t.Fatal(err)
		}
		rec := <-seen
		if rec == nil || rec.LeaseUntil.Sub(rec.UpdatedAt) != lease {
			t.Fatalf("record while running: %+v; want a lease of %v", rec, lease)
		}
	})

	t.Run("little time left", func(t *testing.T) {
		t.Parallel()
		store := newCounting(t)
		const grace = 50 * time.Millisecond
		seen := make(chan *retrysafe.Record, 1)
		h, err := Func(Config{Store: store, Key: "/orderId", DeadlineGrace: grace}, func(ctx context.Context, o order) (receipt, error) {
			seen <- record(t, store, "", "o-5")
			return receipt{Charge: "ch"}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Second)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if _, err := h(ctx, event(t, order{OrderID: "o-5"})); err != nil {
			t.Fatal(err)
		}
		if rec := <-seen; rec == nil || rec.LeaseUntil.Round(0).After(deadline.Round(0).Add(grace)) {
			t.Fatalf("record while running: %+v; want its lease to end by %v", rec, deadline.Add(grace))
		}
	})
}

// TestFuncErrorPolicy: an error releases the key (the retry runs again)
// unless Config.Permanent says it is final; then it is stored and every
// retry gets it back without running the handler.
func TestFuncErrorPolicy(t *testing.T) {
	t.Parallel()
	errDeclined := errors.New("card declined")
	errFlaky := errors.New("provider unavailable")
	store := newCounting(t)
	var runs atomic.Int64
	h, err := Func(Config{Store: store, Key: "/orderId", Permanent: func(err error) bool { return errors.Is(err, errDeclined) }},
		func(ctx context.Context, o order) (receipt, error) {
			runs.Add(1)
			if o.Amount > 100 {
				return receipt{}, errDeclined
			}
			return receipt{}, errFlaky
		})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	flaky := event(t, order{OrderID: "f", Amount: 1})
	for i := range 2 {
		if _, err := h(ctx, flaky); !errors.Is(err, errFlaky) {
			t.Fatalf("flaky run %d: %v", i, err)
		}
	}
	if runs.Load() != 2 || record(t, store, "", "f") != nil {
		t.Fatalf("a released error: %d runs, record %+v; want 2 runs and no record", runs.Load(), record(t, store, "", "f"))
	}
	declined := event(t, order{OrderID: "d", Amount: 500})
	if _, err := h(ctx, declined); !errors.Is(err, errDeclined) {
		t.Fatalf("first declined run: %v", err)
	}
	_, err = h(ctx, declined)
	var failed *retrysafe.FailedError
	if !errors.As(err, &failed) || failed.Message != errDeclined.Error() {
		t.Fatalf("replayed permanent error: %v, want *FailedError %q", err, errDeclined)
	}
	if runs.Load() != 3 {
		t.Fatalf("%d runs, want 3 (the permanent error ran once)", runs.Load())
	}
}

// TestFuncValidate: the fingerprint covers the members Validate names
// (an absent one differs from a null one), and, without Validate, the
// whole event.
func TestFuncValidate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var runs atomic.Int64
	fn := func(ctx context.Context, o order) (receipt, error) { return receipt{Run: runs.Add(1)}, nil }

	h, err := Func(Config{Store: newCounting(t), Key: "/orderId", Validate: []string{"/amount"}}, fn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h(ctx, event(t, order{OrderID: "v", Amount: 1, SentAt: "t1"})); err != nil {
		t.Fatal(err)
	}
	if got, err := h(ctx, event(t, order{OrderID: "v", Amount: 1, SentAt: "t2"})); err != nil || got.Run != 1 {
		t.Fatalf("retry with another unvalidated member: %+v, %v; want the replay", got, err)
	}
	if _, err := h(ctx, event(t, order{OrderID: "v", Amount: 2})); !errors.Is(err, retrysafe.ErrMismatch) {
		t.Fatalf("another amount: %v, want ErrMismatch", err)
	}
	if _, err := h(ctx, json.RawMessage(`{"orderId":"v"}`)); !errors.Is(err, retrysafe.ErrMismatch) {
		t.Fatalf("amount absent: %v, want ErrMismatch", err)
	}

	whole, err := Func(Config{Store: newCounting(t), Key: "/orderId"}, func(ctx context.Context, _ json.RawMessage) (receipt, error) {
		return receipt{Run: runs.Add(1)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := whole(ctx, json.RawMessage(`{"orderId":"w","amount":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := whole(ctx, json.RawMessage(`{ "amount": 1.0, "orderId": "w" }`)); err != nil {
		t.Fatalf("the same event, reordered and respelled: %v", err)
	}
	if _, err := whole(ctx, json.RawMessage(`{"orderId":"w","amount":1,"sentAt":"x"}`)); !errors.Is(err, retrysafe.ErrMismatch) {
		t.Fatalf("another event with the key: %v, want ErrMismatch", err)
	}

	// Without Key, the key is the whole event's hash.
	hashed, err := Func(Config{Store: newCounting(t)}, fn)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := hashed(ctx, json.RawMessage(`{"orderId":"h","amount":1}`))
	b, _ := hashed(ctx, json.RawMessage(`{"amount":1,"orderId":"h"}`))
	c, _ := hashed(ctx, json.RawMessage(`{"amount":2,"orderId":"h"}`))
	if a.Run != b.Run || a.Run == c.Run {
		t.Fatalf("hashed keys: runs %d, %d, %d; want the first two equal, the third new", a.Run, b.Run, c.Run)
	}
}

// TestFuncKeys: a missing key runs unprotected or, with RequireKey, fails
// with ErrNoKey; a key that is not a string or integer is invalid.
func TestFuncKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var runs atomic.Int64
	fn := func(ctx context.Context, o order) (receipt, error) { return receipt{Run: runs.Add(1)}, nil }
	store := newCounting(t)
	loose, err := Func(Config{Store: store, Key: "/orderId"}, fn)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := loose(ctx, json.RawMessage(`{"amount":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	if runs.Load() != 2 || store.claims.Load() != 0 {
		t.Fatalf("keyless events: %d runs, %d claims; want 2 unprotected runs", runs.Load(), store.claims.Load())
	}
	strict, err := Func(Config{Store: store, Key: "/orderId", RequireKey: true}, fn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strict(ctx, json.RawMessage(`{"amount":1}`)); !errors.Is(err, ErrNoKey) {
		t.Fatalf("RequireKey without a key: %v", err)
	}
	if _, err := strict(ctx, json.RawMessage(`{"orderId":{"a":1}}`)); !errors.Is(err, retrysafe.ErrInvalidKey) {
		t.Fatalf("an object as the key: %v", err)
	}
	type numbered struct {
		ID int `json:"id"`
	}
	num, err := Func(Config{Store: store, Key: "/id"}, func(ctx context.Context, n numbered) (int, error) { return n.ID * 2, nil })
	if err != nil {
		t.Fatal(err)
	}
	if got, err := num(ctx, json.RawMessage(`{"id":21}`)); err != nil || got != 42 {
		t.Fatalf("integer key: %d, %v", got, err)
	}
	if record(t, store, "", "21") == nil {
		t.Fatal("no record under the integer key 21")
	}
	if _, err := Func(Config{Store: store, Key: "orderId"}, fn); err == nil {
		t.Fatal("a Key that is not a JSON Pointer was accepted")
	}
	if _, err := Func(Config{Store: store, Validate: []string{""}}, fn); err == nil {
		t.Fatal("the empty Validate pointer was accepted")
	}
	if _, err := Func(Config{}, fn); err == nil {
		t.Fatal("a Config without Store was accepted")
	}
}
