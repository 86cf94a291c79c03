package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// RunShared checks two store values that share one backend over
// independent connections, as two processes would: for 200 rounds, 16
// goroutines split across both stores claim one fresh key and exactly one
// wins; the winner's token fences the other instance, and a takeover
// through one instance fences the old owner on the other.
//
// newPair returns the two stores (for example two pools on one PostgreSQL
// schema, two Redis clients with one key prefix, two *sql.DB on one SQLite
// file) and registers their cleanup with t.Cleanup. The backend must be
// fresh and isolated from other tests.
func RunShared(t *testing.T, newPair func(t *testing.T) (a, b retrysafe.Store)) {
	t.Helper()
	a, b := newPair(t)
	if a == nil || b == nil {
		t.Fatal("storetest: newPair returned a nil store")
	}
	h := newHarness(t, a)
	stores := []retrysafe.Store{a, b}
	const rounds, claimants = 200, 16
	for round := range rounds {
		key := fmt.Sprintf("shared-%03d", round)
		params, results := claimRace(t, h, stores, claimants, scope1, key, fpA, at(0))
		w := oneWinner(t, round, params, results)
		winner, other := stores[w%2], stores[(w+1)%2]
		owner := params[w]

		// A loser's token is fenced on either instance.
		loser := params[(w+1)%claimants]
		wantLeaseLost(t, fmt.Sprintf("round %d: Complete with a loser's token through the other instance", round),
			other.Complete(h.ctx, &retrysafe.CompleteParams{Scope: scope1, Key: key, Token: loser.Token, Now: at(time.Second), TTL: ttl, Response: sampleResponse()}))

		if round%2 == 0 {
			// The winner finishes through the other instance; both see it.
			if err := other.Complete(h.ctx, &retrysafe.CompleteParams{Scope: scope1, Key: key, Token: owner.Token, Now: at(time.Second), TTL: ttl, Response: sampleResponse()}); err != nil {
				t.Fatalf("round %d: Complete by the winner through the other instance: %v", round, err)
			}
			for i, s := range stores {
				rec, err := s.Get(h.ctx, &retrysafe.GetParams{Scope: scope1, Key: key, Now: at(time.Second)})
				if err != nil || rec.State != retrysafe.StateCompleted || rec.Token != owner.Token {
					t.Fatalf("round %d: Get through instance %d after completion: %s, %v", round, i, describe(rec), err)
				}
			}
			continue
		}

		// The lease runs out; the other instance takes over; the old
		// owner, on its own instance, is fenced.
		take := claimParams(scope1, key, fpA, at(lease))
		res, err := other.Claim(h.ctx, take)
		if err != nil || !res.Claimed {
			t.Fatalf("round %d: takeover through the other instance: %+v, %v", round, res, err)
		}
		err = winner.Complete(h.ctx, &retrysafe.CompleteParams{Scope: scope1, Key: key, Token: owner.Token, Now: at(lease), TTL: ttl, Response: sampleResponse()})
		wantLeaseLost(t, fmt.Sprintf("round %d: Complete by the old owner after a takeover on the other instance", round), err)
		if err := winner.Release(h.ctx, &retrysafe.ReleaseParams{Scope: scope1, Key: key, Token: take.Token}); err != nil {
			t.Fatalf("round %d: Release by the new owner through the first instance: %v", round, err)
		}
		if _, err := other.Get(h.ctx, &retrysafe.GetParams{Scope: scope1, Key: key, Now: at(lease)}); !errors.Is(err, retrysafe.ErrNotFound) {
			t.Fatalf("round %d: Get through the other instance after Release: %v, want ErrNotFound", round, err)
		}
	}
}
