package retrysafe

import (
	"context"
	"errors"
	"testing"
	"time"
)

// stallingStore is a Store whose Claim waits for its context to end, as a
// backend that stopped answering; nonBlocking is what it claims about itself.
type stallingStore struct {
	Store       // nil: only Claim is called
	nonBlocking bool
	deadline    chan bool // receives whether Claim's context had a deadline
}

func (s *stallingStore) NonBlocking() bool { return s.nonBlocking }

func (s *stallingStore) Claim(ctx context.Context, _ *ClaimParams) (*ClaimResult, error) {
	_, ok := ctx.Deadline()
	s.deadline <- ok
	if s.nonBlocking {
		return nil, errors.New("not claimed")
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func newTestEngine(t *testing.T, s Store) *engine {
	t.Helper()
	cfg, err := Config{Store: s, StoreTimeout: 20 * time.Millisecond}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return newEngine(&cfg)
}

// TestCallStoreTimeout: a store call that outlives StoreTimeout fails with
// a StoreError matching ErrStoreUnavailable, while one cut short by the
// caller's own (earlier) deadline fails with the context's error; a store
// that never blocks gets no StoreTimeout deadline of its own.
func TestCallStoreTimeout(t *testing.T) {
	t.Parallel()
	t.Run("store timeout", func(t *testing.T) {
		t.Parallel()
		s := &stallingStore{deadline: make(chan bool, 1)}
		_, err := newTestEngine(t, s).claim(context.Background(), "", "k", "fp")
		var se *StoreError
		if !errors.As(err, &se) || !errors.Is(err, ErrStoreUnavailable) || !<-s.deadline {
			t.Fatalf("err = %v, want a StoreError matching ErrStoreUnavailable", err)
		}
	})
	t.Run("caller's earlier deadline", func(t *testing.T) {
		t.Parallel()
		s := &stallingStore{deadline: make(chan bool, 1)}
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		_, err := newTestEngine(t, s).claim(ctx, "", "k", "fp")
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrStoreUnavailable) || !<-s.deadline {
			t.Fatalf("err = %v, want the caller's context.DeadlineExceeded", err)
		}
	})
	t.Run("non-blocking store", func(t *testing.T) {
		t.Parallel()
		s := &stallingStore{nonBlocking: true, deadline: make(chan bool, 1)}
		_, err := newTestEngine(t, s).claim(context.Background(), "", "k", "fp")
		if err == nil || <-s.deadline {
			t.Fatalf("err = %v; a NonBlocking store's call must run without a StoreTimeout deadline", err)
		}
	})
}
