package retrysafe_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// keepNothingStore is a Store that keeps nothing: every claim of a new key
// wins, and every claim of a key that BenchmarkMiddlewareOwnCost's replays
// use returns one completed record. It isolates the middleware's own cost
// from a store's.
type keepNothingStore struct {
	replay *retrysafe.ClaimResult
}

func (s *keepNothingStore) Claim(_ context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	if s.replay != nil && p.Key == s.replay.Record.Key {
		return s.replay, nil
	}
	return &retrysafe.ClaimResult{Claimed: true, Record: p.ProcessingRecord(1, p.Now, p.Now, p.Now.Add(p.Lease))}, nil
}

func (*keepNothingStore) Get(context.Context, *retrysafe.GetParams) (*retrysafe.Record, error) {
	return nil, retrysafe.ErrNotFound
}
func (*keepNothingStore) Extend(context.Context, *retrysafe.ExtendParams) error     { return nil }
func (*keepNothingStore) Complete(context.Context, *retrysafe.CompleteParams) error { return nil }
func (*keepNothingStore) Release(context.Context, *retrysafe.ReleaseParams) error   { return nil }
func (*keepNothingStore) NonBlocking() bool                                         { return true }

// BenchmarkMiddlewareOwnCost is BenchmarkMiddleware on a store that keeps
// nothing: what the root package itself costs per new key and per replay.
func BenchmarkMiddlewareOwnCost(b *testing.B) {
	for _, replay := range []bool{false, true} {
		name := "new"
		if replay {
			name = "replay"
		}
		b.Run(name, func(b *testing.B) {
			store := &keepNothingStore{}
			if replay {
				now := time.Now()
				store.replay = &retrysafe.ClaimResult{Record: &retrysafe.Record{
					Key: "stored", Fingerprint: retrysafe.Fingerprint(http.MethodPost, ordersURL.Path, "", ordersBody, nil),
					State: retrysafe.StateCompleted, Token: retrysafe.NewToken(), Attempt: 1,
					CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour),
					Response: &retrysafe.Response{Status: http.StatusCreated,
						Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ord_1"}`)},
				}}
			}
			mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store})
			if err != nil {
				b.Fatal(err)
			}
			h := mw(ordersHandler)
			w := &benchWriter{header: make(http.Header)}
			key := "fresh"
			if replay {
				key = "stored"
			}
			b.ReportAllocs()
			for b.Loop() {
				serveOrders(b, h, w, key)
			}
		})
	}
}
