package retrysafe_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

type receipt struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// doWith runs fn through a Doer made for cfg: the call the tests make for
// a one-off config.
func doWith[T any](ctx context.Context, cfg *retrysafe.DoConfig, key, fingerprint string, fn func(context.Context) (T, error)) (T, error) {
	d, err := retrysafe.NewDoer(*cfg)
	if err != nil {
		var zero T
		return zero, err
	}
	return retrysafe.Run(ctx, d, key, fingerprint, fn)
}

func newMemory(t *testing.T) *memory.Store {
	t.Helper()
	s := memory.New(memory.Config{})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestDoRunsOnceAndReplays(t *testing.T) {
	t.Parallel()
	s := newMemory(t)
	var runs atomic.Int64
	fn := func(ctx context.Context) (receipt, error) {
		n := runs.Add(1)
		if op := retrysafe.OperationFromContext(ctx); op == nil || op.Key() != "msg-1" {
			t.Errorf("operation in ctx = %v", op)
		}
		return receipt{ID: fmt.Sprintf("r%d", n), Amount: 100}, nil
	}
	first, err := retrysafe.Do(context.Background(), s, "msg-1", "fp", fn)
	if err != nil {
		t.Fatal(err)
	}
	second, err := retrysafe.Do(context.Background(), s, "msg-1", "fp", fn)
	if err != nil {
		t.Fatal(err)
	}
	if first != second || runs.Load() != 1 {
		t.Fatalf("first %+v second %+v runs %d", first, second, runs.Load())
	}
	if _, err := retrysafe.Do(context.Background(), s, "msg-1", "other", fn); !errors.Is(err, retrysafe.ErrMismatch) {
		t.Fatalf("other fingerprint: err = %v, want ErrMismatch", err)
	}
}

func TestDoFailures(t *testing.T) {
	t.Parallel()
	t.Run("permanent failure is stored", func(t *testing.T) {
		t.Parallel()
		s := newMemory(t)
		var runs atomic.Int64
		fn := func(context.Context) (int, error) {
			runs.Add(1)
			return 0, retrysafe.Permanent(errors.New("card declined"))
		}
		_, err1 := retrysafe.Do(context.Background(), s, "k", "", fn)
		_, err2 := retrysafe.Do(context.Background(), s, "k", "", fn)
		var failed *retrysafe.FailedError
		if err1 == nil || !errors.As(err2, &failed) || failed.Message != "card declined" || !retrysafe.IsPermanent(err2) {
			t.Fatalf("err1 %v err2 %v", err1, err2)
		}
		if runs.Load() != 1 {
			t.Fatalf("runs = %d, want 1", runs.Load())
		}
	})
	t.Run("transient failure releases the key", func(t *testing.T) {
		t.Parallel()
		s := newMemory(t)
		var runs atomic.Int64
		fn := func(context.Context) (int, error) {
			if runs.Add(1) == 1 {
				return 0, errors.New("provider timeout")
			}
			return 7, nil
		}
		if _, err := retrysafe.Do(context.Background(), s, "k", "", fn); err == nil || retrysafe.IsPermanent(err) {
			t.Fatalf("first err = %v", err)
		}
		v, err := retrysafe.Do(context.Background(), s, "k", "", fn)
		if err != nil || v != 7 || runs.Load() != 2 {
			t.Fatalf("redelivery: v %d err %v runs %d", v, err, runs.Load())
		}
	})
	t.Run("panic releases the key", func(t *testing.T) {
		t.Parallel()
		s := newMemory(t)
		func() {
			defer func() { _ = recover() }()
			_, _ = retrysafe.Do(context.Background(), s, "k", "", func(context.Context) (int, error) { panic("bug") })
		}()
		v, err := retrysafe.Do(context.Background(), s, "k", "", func(context.Context) (int, error) { return 1, nil })
		if err != nil || v != 1 {
			t.Fatalf("after panic: %d %v", v, err)
		}
	})
	t.Run("invalid key", func(t *testing.T) {
		t.Parallel()
		s := newMemory(t)
		for _, k := range []string{"", strings.Repeat("k", 256), "tab\tkey"} {
			_, err := retrysafe.Do(context.Background(), s, k, "", func(context.Context) (int, error) {
				t.Error("ran with an invalid key")
				return 0, nil
			})
			if !errors.Is(err, retrysafe.ErrInvalidKey) {
				t.Fatalf("key %q: err = %v", k, err)
			}
		}
	})
	t.Run("store unavailable runs nothing", func(t *testing.T) {
		t.Parallel()
		s := memory.New(memory.Config{})
		_ = s.Close()
		_, err := retrysafe.Do(context.Background(), s, "k", "", func(context.Context) (int, error) {
			t.Error("ran without a store")
			return 0, nil
		})
		if !errors.Is(err, retrysafe.ErrStoreUnavailable) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestDoConcurrentDuplicatesWaitForTheOriginal(t *testing.T) {
	t.Parallel()
	s := newMemory(t)
	var runs atomic.Int64
	fn := func(context.Context) (receipt, error) {
		runs.Add(1)
		time.Sleep(50 * time.Millisecond)
		return receipt{ID: "once"}, nil
	}
	const n = 100
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]receipt, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = doWith(context.Background(), &retrysafe.DoConfig{Store: s, WaitTimeout: 10 * time.Second}, "dup", "fp", fn)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || results[i].ID != "once" {
			t.Fatalf("caller %d: %+v %v", i, results[i], errs[i])
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("runs = %d, want 1", runs.Load())
	}
}

func TestDoLeaseExpiryAfterCrash(t *testing.T) {
	t.Parallel()
	s := newMemory(t)
	now := time.Now()
	clock := func() time.Time { return now }
	// A worker claimed the key and crashed: the record stays processing.
	res, err := s.Claim(context.Background(), &retrysafe.ClaimParams{Scope: "", Key: "k", Fingerprint: "fp", Token: retrysafe.NewToken(), Now: now, Lease: time.Second})
	if err != nil || !res.Claimed {
		t.Fatal(res, err)
	}
	cfg := &retrysafe.DoConfig{Store: s, Now: clock, InFlight: retrysafe.InFlightConflict}
	run := func(context.Context) (int, error) { return 1, nil }
	if _, err := doWith(context.Background(), cfg, "k", "fp", run); !errors.Is(err, retrysafe.ErrInProgress) {
		t.Fatalf("within the lease: err = %v, want ErrInProgress", err)
	}
	now = now.Add(2 * time.Second)
	var attempt int
	v, err := doWith(context.Background(), cfg, "k", "fp", func(ctx context.Context) (int, error) {
		attempt = retrysafe.OperationFromContext(ctx).Attempt()
		return 2, nil
	})
	if err != nil || v != 2 || attempt != 2 {
		t.Fatalf("after the lease: v %d err %v attempt %d", v, err, attempt)
	}
}

// TestDoCallerCancellationReachesFn: fn runs with the caller's context, not
// a detached one: its values reach fn, a consumer that shuts down cancels
// fn, and an fn that returns the context's error releases the key, so the
// redelivery runs it again.
func TestDoCallerCancellationReachesFn(t *testing.T) {
	t.Parallel()
	s := newMemory(t)
	type ctxKey struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "consumer"))
	_, err := retrysafe.Do(ctx, s, "msg-cancel", "fp", func(ctx context.Context) (receipt, error) {
		if v := ctx.Value(ctxKey{}); v != "consumer" {
			t.Errorf("caller's value in fn's context = %v", v)
		}
		if retrysafe.OperationFromContext(ctx) == nil {
			t.Error("no operation in fn's context")
		}
		cancel() // the consumer shuts down while fn runs: that reaches fn at once
		if ctx.Err() == nil {
			t.Error("the caller's cancellation did not reach fn's context")
			return receipt{}, errors.New("not cancelled")
		}
		return receipt{}, ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	runs := 0
	got, err := retrysafe.Do(context.Background(), s, "msg-cancel", "fp", func(context.Context) (receipt, error) {
		runs++
		return receipt{ID: "r2"}, nil
	})
	if err != nil || runs != 1 || got.ID != "r2" {
		t.Fatalf("redelivery: %+v err %v runs %d, want fn run again", got, err, runs)
	}
}
