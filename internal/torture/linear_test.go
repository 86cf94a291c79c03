package torture

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/internal/e2e/stores"

	"github.com/anishathalye/porcupine"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/memory"
)

func workload() StoreWorkload {
	if testing.Short() {
		return StoreWorkload{Workers: 4, Ops: 60}
	}
	return StoreWorkload{}
}

// TestStoreLinearizable records concurrent histories of store calls against
// every store and checks them against the model of the Store contract.
func TestStoreLinearizable(t *testing.T) {
	t.Parallel()
	for name, newStore := range stores.All {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			h := RecordStore(context.Background(), s, workload())
			html := filepath.Join(t.TempDir(), name+".html")
			res, err := CheckStore(name, h, time.Minute, html)
			if err != nil {
				t.Fatal(err)
			}
			if as := res.Anomalies(); len(as) > 0 || res.Result != string(porcupine.Ok) {
				keepHTML(t, html)
				t.Fatalf("%s: %d operations, porcupine says %s; anomalies %+v", name, res.Operations, res.Result, as)
			}
			t.Logf("%s: %d operations linearizable", name, res.Operations)
		})
	}
}

// keepHTML copies a failing history's visualization where CI keeps it
// (RETRYSAFE_TORTURE_OUT), or names it in the log.
func keepHTML(t *testing.T, path string) {
	dir := os.Getenv("RETRYSAFE_TORTURE_OUT")
	if dir == "" {
		t.Logf("visualization: %s (removed with the test's temp dir; set RETRYSAFE_TORTURE_OUT to keep it)", path)
		return
	}
	b, err := os.ReadFile(path)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, filepath.Base(path)), b, 0o644)
	}
	t.Logf("visualization kept in %s (err %v)", dir, err)
}

// The checker's teeth: broken stores that each break one rule of the
// contract. Each must be caught.

// unfencedComplete completes whatever processing record it finds, with the
// record's current token instead of the caller's.
type unfencedComplete struct{ retrysafe.Store }

func (s unfencedComplete) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: p.Now})
	if err == nil && rec.State == retrysafe.StateProcessing {
		q := *p
		q.Token = rec.Token
		p = &q
	}
	return s.Store.Complete(ctx, p)
}

// unfencedRelease deletes the record whoever owns it.
type unfencedRelease struct{ retrysafe.Store }

func (s unfencedRelease) Release(ctx context.Context, p *retrysafe.ReleaseParams) error {
	rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: time.Now()})
	if err == nil && rec.State == retrysafe.StateProcessing {
		q := *p
		q.Token = rec.Token
		p = &q
	}
	return s.Store.Release(ctx, p)
}

// checkThenInsert claims in two steps: it looks for a record and, when
// there is none, writes its own over whatever appeared meanwhile.
type checkThenInsert struct{ *memory.Store }

func (s checkThenInsert) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	_, err := s.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: p.Now})
	if !errors.Is(err, retrysafe.ErrNotFound) {
		return s.Store.Claim(ctx, p)
	}
	time.Sleep(time.Millisecond) // another claimant gets in here
	_ = s.Delete(ctx, p.Scope, p.Key)
	return s.Store.Claim(ctx, p)
}

// noTakeover never takes over an expired lease.
type noTakeover struct{ retrysafe.Store }

func (s noTakeover) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: p.Now})
	if err == nil && rec.State == retrysafe.StateProcessing {
		return &retrysafe.ClaimResult{Record: rec}, nil
	}
	return s.Store.Claim(ctx, p)
}

func TestStoreCheckerCatchesBrokenStores(t *testing.T) {
	t.Parallel()
	broken := map[string]func(t *testing.T) retrysafe.Store{
		"unfenced complete":         func(t *testing.T) retrysafe.Store { return unfencedComplete{testenv.Memory(t)} },
		"unfenced release":          func(t *testing.T) retrysafe.Store { return unfencedRelease{testenv.Memory(t)} },
		"check-then-insert":         func(t *testing.T) retrysafe.Store { return checkThenInsert{testenv.Memory(t)} },
		"no lease takeover":         func(t *testing.T) retrysafe.Store { return noTakeover{testenv.Memory(t)} },
		"sqlite, unfenced complete": func(t *testing.T) retrysafe.Store { return unfencedComplete{stores.SQLite(t)} },
	}
	for name, newStore := range broken {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// A violation needs the right interleaving; a few histories
			// make missing it vanishingly unlikely.
			for attempt := range 5 {
				h := RecordStore(context.Background(), newStore(t), StoreWorkload{Workers: 6, Ops: 100, Keys: 2})
				html := filepath.Join(t.TempDir(), "broken.html")
				res, err := CheckStore(name, h, time.Minute, html)
				if err != nil {
					t.Fatal(err)
				}
				if res.Result == string(porcupine.Illegal) {
					if fi, err := os.Stat(html); err != nil || fi.Size() == 0 {
						t.Fatalf("no visualization written: %v", err)
					}
					t.Logf("caught on history %d: %s", attempt+1, res.Anomalies()[0].Detail)
					return
				}
			}
			t.Fatalf("five histories of a store with %s passed the linearizability check", name)
		})
	}
}
