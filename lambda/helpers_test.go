package retrysafelambda

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// countingStore counts the calls that reach the store below it.
type countingStore struct {
	retrysafe.Store
	claims, gets, completes atomic.Int64
	keyClaims               sync.Map // key → *atomic.Int64
}

// claimsOf returns the number of claims of key so far.
func (s *countingStore) claimsOf(key string) int64 {
	v, _ := s.keyClaims.LoadOrStore(key, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

func (s *countingStore) Unwrap() retrysafe.Store { return s.Store }

func (s *countingStore) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	s.claims.Add(1)
	v, _ := s.keyClaims.LoadOrStore(p.Key, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	return s.Store.Claim(ctx, p)
}

func (s *countingStore) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, p)
}

func (s *countingStore) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	s.completes.Add(1)
	return s.Store.Complete(ctx, p)
}

func newCounting(t *testing.T) *countingStore {
	return &countingStore{Store: testenv.Memory(t)}
}

// record reads the record of key in scope, failing t on a store error
// other than ErrNotFound (then nil).
func record(t *testing.T, s retrysafe.Store, scope, key string) *retrysafe.Record {
	t.Helper()
	rec, err := s.Get(context.Background(), &retrysafe.GetParams{Scope: scope, Key: key, Now: time.Now()})
	if err != nil {
		if err == retrysafe.ErrNotFound {
			return nil
		}
		t.Fatal(err)
	}
	return rec
}

// failingStore fails the calls it is told to, as an unreachable backend.
type failingStore struct {
	retrysafe.Store
	claim, complete atomic.Bool
}

func (s *failingStore) Unwrap() retrysafe.Store { return s.Store }

func (s *failingStore) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	if s.claim.Load() {
		return nil, retrysafe.Unavailable("claim", errors.New("connection refused"))
	}
	return s.Store.Claim(ctx, p)
}

func (s *failingStore) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	if s.complete.Load() {
		return retrysafe.Unavailable("complete", errors.New("connection reset"))
	}
	return s.Store.Complete(ctx, p)
}
