package mysql_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/mysql"
)

// TestClaimReleaseChurn: 32 goroutines on two Stores (two *sql.DB) claim
// and release 4 neighbouring keys in a loop. Releases leave delete-marked
// rows beside concurrent inserts, where InnoDB takes gap locks and may pick
// deadlock victims: every call must still succeed (a deadlocked claim is
// retried), and a key never has two owners at once.
func TestClaimReleaseChurn(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	stores := []*mysql.Store{newStoreOn(t, newDB(t, 16), table), newStoreOn(t, newDB(t, 16), table)}
	const goroutines, keys = 32, 4
	deadline := time.Now().Add(2 * time.Second)
	var owners [keys]atomic.Int32
	var wins, losses atomic.Int64
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			s := stores[g%2]
			for i := 0; time.Now().Before(deadline); i++ {
				k := (g + i) % keys
				p := claimP(fmt.Sprintf("churn-%d", k), fpA, at(0))
				res, err := s.Claim(t.Context(), p)
				if err != nil {
					errs <- fmt.Errorf("Claim: %w", err)
					return
				}
				if !res.Claimed {
					losses.Add(1)
					continue
				}
				wins.Add(1)
				if n := owners[k].Add(1); n != 1 {
					errs <- fmt.Errorf("key %d has %d owners", k, n)
					return
				}
				time.Sleep(50 * time.Microsecond) // hold the key a little
				owners[k].Add(-1)
				if err := s.Release(t.Context(), &retrysafe.ReleaseParams{Scope: scope, Key: p.Key, Token: p.Token}); err != nil {
					errs <- fmt.Errorf("Release by the owner: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if errors.Is(err, retrysafe.ErrStoreUnavailable) {
			t.Errorf("%v (a deadlock that was not retried?)", err)
			continue
		}
		t.Error(err)
	}
	if wins.Load() == 0 || losses.Load() == 0 {
		t.Fatalf("wins %d, losses %d: the goroutines did not contend", wins.Load(), losses.Load())
	}
	t.Logf("%d claims won, %d blocked, %d deadlocked claims run again", wins.Load(), losses.Load(),
		stores[0].DeadlockRetries()+stores[1].DeadlockRetries())
}
