package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// UnavailableTimeout is the context deadline RunUnavailable gives each call.
// A broken store must answer with ErrStoreUnavailable before it: a call
// that waits out the deadline returns context.DeadlineExceeded and fails
// the check. Keep backend connect timeouts shorter than this.
const UnavailableTimeout = 5 * time.Second

// ReadyCheckLimit is how long [admin.ReadyChecker.CheckReady] may take
// on a store whose backend refuses connections (RunUnavailable checks it):
// half the gateway's readiness deadline, and far more than a refused dial
// needs. A check that waits out its client's retries takes longer (the
// Redis store's Ping, with go-redis's defaults, about 1.7 s).
const ReadyCheckLimit = time.Second

// RunUnavailable checks that a store whose backend cannot be reached (a
// closed pool, a dead port, a closed memory store) returns errors matching
// [retrysafe.ErrStoreUnavailable] from every method, promptly (before the
// context deadline of [UnavailableTimeout] the suite sets), without
// panicking.
//
// newBroken returns such a store and registers its cleanup with
// t.Cleanup. The optional interfaces are checked when the store implements
// them: Ping, CheckReady, Sweep, Subscribe, List and Delete must fail the
// same way, and CheckReady within [ReadyCheckLimit] whatever retries the
// store's client makes.
func RunUnavailable(t *testing.T, newBroken func(t *testing.T) retrysafe.Store) {
	t.Helper()
	s := newBroken(t)
	if s == nil {
		t.Fatal("storetest: newBroken returned a nil store")
	}
	now := at(0)
	tok := retrysafe.NewToken()
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Claim", func(ctx context.Context) error {
			_, err := s.Claim(ctx, claimParams(scope1, "k", fpA, now))
			return err
		}},
		{"Get", func(ctx context.Context) error {
			_, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope1, Key: "k", Now: now})
			return err
		}},
		{"Extend", func(ctx context.Context) error {
			return s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope1, Key: "k", Token: tok, Now: now, Lease: lease})
		}},
		{"Complete", func(ctx context.Context) error {
			return s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope1, Key: "k", Token: tok, Now: now, TTL: ttl, Response: sampleResponse()})
		}},
		{"Release", func(ctx context.Context) error {
			return s.Release(ctx, &retrysafe.ReleaseParams{Scope: scope1, Key: "k", Token: tok})
		}},
	}
	if p, ok := retrysafe.As[admin.Pinger](s); ok {
		calls = append(calls, struct {
			name string
			call func(ctx context.Context) error
		}{"Ping", p.Ping})
	}
	if rc, ok := retrysafe.As[admin.ReadyChecker](s); ok {
		calls = append(calls, struct {
			name string
			call func(ctx context.Context) error
		}{"CheckReady", rc.CheckReady})
	}
	if sw, ok := retrysafe.As[admin.Sweeper](s); ok {
		calls = append(calls, struct {
			name string
			call func(ctx context.Context) error
		}{"Sweep", func(ctx context.Context) error {
			_, err := sw.Sweep(ctx, &admin.SweepParams{Now: now})
			return err
		}})
	}
	if nf, ok := retrysafe.As[retrysafe.Notifier](s); ok {
		calls = append(calls, struct {
			name string
			call func(ctx context.Context) error
		}{"Subscribe", func(ctx context.Context) error {
			_, unsubscribe, err := nf.Subscribe(ctx, scope1, "k")
			if err == nil && unsubscribe != nil {
				unsubscribe()
			}
			return err
		}})
	}
	if ad, ok := retrysafe.As[admin.Admin](s); ok {
		calls = append(calls, struct {
			name string
			call func(ctx context.Context) error
		}{"List", func(ctx context.Context) error {
			_, err := ad.List(ctx, &admin.ListParams{})
			return err
		}}, struct {
			name string
			call func(ctx context.Context) error
		}{"Delete", func(ctx context.Context) error { return ad.Delete(ctx, scope1, "k") }})
	}

	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), UnavailableTimeout)
			defer cancel()
			start := time.Now()
			err := callGuarded(ctx, c.call)
			if !errors.Is(err, retrysafe.ErrStoreUnavailable) {
				t.Fatalf("%s on an unreachable store: error %v, want one matching ErrStoreUnavailable", c.name, err)
			}
			if took := time.Since(start); c.name == "CheckReady" && took > ReadyCheckLimit {
				t.Fatalf("CheckReady on an unreachable store took %s, want at most %s (ReadyCheckLimit): it waits out its client's retries", took, ReadyCheckLimit)
			}
		})
	}
}

// callGuarded runs call, turning a panic into an error and giving up (with
// an error) when call has not returned well after ctx's deadline.
func callGuarded(ctx context.Context, call func(ctx context.Context) error) error {
	errc := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("panic: %v", r)
			}
		}()
		errc <- call(ctx)
	}()
	deadline, _ := ctx.Deadline()
	hang := time.NewTimer(time.Until(deadline) + UnavailableTimeout)
	defer hang.Stop()
	select {
	case err := <-errc:
		return err
	case <-hang.C:
		return fmt.Errorf("no answer %s after the context deadline: the call ignores its context", UnavailableTimeout)
	}
}
