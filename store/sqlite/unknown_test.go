package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// TestUnknownOutcomes walks one record through the store contract of
// issue 30: a checkpoint and an abandon ride on the fenced Extend, a
// takeover keeps the checkpoint and clears the abandon, NoTakeover and
// TakeoverToken refuse a takeover, and Stats counts an abandoned record
// as unknown while its lease still runs.
func TestUnknownOutcomes(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	p := claimParams("k", "fp", base)
	mustClaim(t, s, p)
	get := func(now time.Time) *retrysafe.Record {
		t.Helper()
		rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: now})
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		return rec
	}
	data := bytes.Repeat([]byte{0, 0xff, 'x'}, retrysafe.MaxCheckpointData/3)
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: p.Scope, Key: p.Key, Token: retrysafe.NewToken(), Now: base,
		Lease: time.Minute, Checkpoint: &retrysafe.Checkpoint{Name: "charged", Data: data}}); !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("checkpoint under another token = %v, want ErrLeaseLost", err)
	}
	if rec := get(base); rec.Checkpoint != nil {
		t.Fatalf("a fenced-out checkpoint was stored: %+v", rec.Checkpoint)
	}
	t1 := base.Add(time.Second)
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: p.Scope, Key: p.Key, Token: p.Token, Now: t1,
		Lease: time.Minute, Checkpoint: &retrysafe.Checkpoint{Name: "charged", Data: data, At: base.Add(-time.Hour)}}); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	rec := get(t1)
	if cp := rec.Checkpoint; cp == nil || cp.Name != "charged" || !bytes.Equal(cp.Data, data) || !cp.At.Equal(t1) {
		t.Fatalf("checkpoint read back as %+v, want charged with %d bytes at Now", cp, len(data))
	}
	if !rec.LeaseUntil.Equal(t1.Add(time.Minute)) || rec.Abandoned {
		t.Fatalf("after a checkpoint: lease until %v (want Now+Lease), abandoned %v", rec.LeaseUntil, rec.Abandoned)
	}

	// Abandon leaves the lease as it is, and the record is unknown at once.
	t2 := t1.Add(time.Second)
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: p.Scope, Key: p.Key, Token: p.Token, Now: t2, Lease: time.Hour, Abandon: true}); err != nil {
		t.Fatalf("abandon: %v", err)
	}
	rec = get(t2)
	if !rec.Abandoned || !rec.LeaseUntil.Equal(t1.Add(time.Minute)) || rec.Checkpoint == nil || admin.StatusOf(rec, t2) != admin.StatusUnknown {
		t.Fatalf("after abandon: abandoned %v, lease until %v (want %v), checkpoint %v, status %s",
			rec.Abandoned, rec.LeaseUntil, t1.Add(time.Minute), rec.Checkpoint != nil, admin.StatusOf(rec, t2))
	}
	st, err := s.Stats(ctx, &admin.StatsParams{Now: t2})
	if err != nil {
		t.Fatal(err)
	}
	if st.LeaseExpired != 1 || len(st.Unknown) != 1 || st.OldestInFlight != nil || !st.Unknown[0].Abandoned {
		t.Fatalf("Stats of an abandoned record: %d unknown, %d listed, oldest in flight %v", st.LeaseExpired, len(st.Unknown), st.OldestInFlight)
	}

	// Past the lease: NoTakeover and a TakeoverToken of another owner
	// leave the record as it is; its own token takes it over.
	late := t1.Add(2 * time.Minute)
	for name, q := range map[string]*retrysafe.ClaimParams{
		"NoTakeover":            {NoTakeover: true, TakeoverToken: p.Token},
		"another TakeoverToken": {TakeoverToken: retrysafe.NewToken()},
		"another fingerprint":   {Fingerprint: "other"},
	} {
		c := claimParams(p.Key, "fp", late)
		c.NoTakeover, c.TakeoverToken = q.NoTakeover, q.TakeoverToken
		if q.Fingerprint != "" {
			c.Fingerprint = q.Fingerprint
		}
		res := mustClaim(t, s, c)
		if res.Claimed || res.Record.Token != p.Token || !res.Record.Abandoned || res.Record.Checkpoint == nil {
			t.Fatalf("%s: claimed %v, record token ours %v, abandoned %v", name, res.Claimed, res.Record.Token == p.Token, res.Record.Abandoned)
		}
	}
	c := claimParams(p.Key, "fp", late)
	c.TakeoverToken = p.Token
	res := mustClaim(t, s, c)
	if !res.Claimed || res.Record.Attempt != 2 || res.Record.Abandoned {
		t.Fatalf("takeover with the record's token: claimed %v, attempt %d, abandoned %v", res.Claimed, res.Record.Attempt, res.Record.Abandoned)
	}
	if cp := res.Record.Checkpoint; cp == nil || cp.Name != "charged" || !bytes.Equal(cp.Data, data) || !cp.At.Equal(t1) {
		t.Fatalf("takeover returned checkpoint %+v, want the kept one", cp)
	}
	if rec := get(late); rec.Abandoned || rec.Checkpoint == nil || rec.Token != c.Token {
		t.Fatalf("after the takeover: abandoned %v, checkpoint %v", rec.Abandoned, rec.Checkpoint != nil)
	}

	// Complete clears nothing of the checkpoint; an abandoned record
	// completes (a resolver's answer) and is abandoned no more.
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: p.Scope, Key: p.Key, Token: c.Token, Now: late, Abandon: true,
		Checkpoint: &retrysafe.Checkpoint{Name: "second"}}); err != nil {
		t.Fatalf("abandon with a checkpoint: %v", err)
	}
	if rec := get(late); !rec.Abandoned || rec.Checkpoint.Name != "second" || len(rec.Checkpoint.Data) != 0 {
		t.Fatalf("abandon with a checkpoint: abandoned %v, checkpoint %+v", rec.Abandoned, rec.Checkpoint)
	}
	if err := s.Complete(ctx, completeParams(c, late, "done")); err != nil {
		t.Fatal(err)
	}
	if rec := get(late); rec.Abandoned || rec.Checkpoint == nil || rec.Checkpoint.Name != "second" || admin.StatusOf(rec, late) != admin.StatusCompleted {
		t.Fatalf("after Complete: abandoned %v, checkpoint %+v, status %s", rec.Abandoned, rec.Checkpoint, admin.StatusOf(rec, late))
	}

	// A completed record that expired is replaced by a new one, which
	// starts without the old checkpoint.
	fresh := claimParams(p.Key, "fp", late.Add(2*time.Hour))
	if res := mustClaim(t, s, fresh); !res.Claimed || res.Record.Attempt != 1 || res.Record.Checkpoint != nil {
		t.Fatalf("claim of an expired record: claimed %v, attempt %d, checkpoint %+v", res.Claimed, res.Record.Attempt, res.Record.Checkpoint)
	}
	if rec := get(late.Add(2 * time.Hour)); rec.Checkpoint != nil {
		t.Fatalf("the replaced record kept the old checkpoint %+v", rec.Checkpoint)
	}
}

// TestCheckpointTx: a checkpoint written in the business transaction is
// there when the transaction commits and absent when it rolls back, and
// it is fenced like Extend.
func TestCheckpointTx(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		t.Run(map[bool]string{true: "commit", false: "rollback"}[commit], func(t *testing.T) {
			t.Parallel()
			db, s := openApp(t)
			ctx := context.Background()
			p := claimParams("order-key", "fp", base)
			mustClaim(t, s, p)
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, amount) VALUES ('o-1', 4200)`); err != nil {
				t.Fatal(err)
			}
			now := base.Add(time.Second)
			cp := &retrysafe.ExtendParams{Scope: p.Scope, Key: p.Key, Token: p.Token, Now: now, Lease: time.Minute,
				Checkpoint: &retrysafe.Checkpoint{Name: "order placed", Data: []byte("o-1")}}
			if err := s.CheckpointTx(ctx, tx, cp); err != nil {
				t.Fatalf("CheckpointTx: %v", err)
			}
			if commit {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if n := countOrders(t, db); commit != (n == 1) || commit != (rec.Checkpoint != nil) {
				t.Fatalf("commit %v: %d orders, checkpoint %+v", commit, n, rec.Checkpoint)
			}
			if commit && (rec.Checkpoint.Name != "order placed" || string(rec.Checkpoint.Data) != "o-1" ||
				!rec.Checkpoint.At.Equal(now) || !rec.LeaseUntil.Equal(now.Add(time.Minute))) {
				t.Fatalf("committed checkpoint %+v, lease until %v", rec.Checkpoint, rec.LeaseUntil)
			}
			if !commit && !rec.LeaseUntil.Equal(p.Now.Add(p.Lease)) {
				t.Fatalf("rolled back: lease until %v, want the claim's", rec.LeaseUntil)
			}
		})
	}
	t.Run("fenced", func(t *testing.T) {
		t.Parallel()
		db, s := openApp(t)
		ctx := context.Background()
		p := claimParams("order-key", "fp", base)
		mustClaim(t, s, p)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		err = s.CheckpointTx(ctx, tx, &retrysafe.ExtendParams{Scope: p.Scope, Key: p.Key, Token: retrysafe.NewToken(), Now: base,
			Lease: time.Minute, Checkpoint: &retrysafe.Checkpoint{Name: "x"}})
		if !errors.Is(err, retrysafe.ErrLeaseLost) {
			t.Fatalf("CheckpointTx under another token = %v, want ErrLeaseLost", err)
		}
		// tx stays usable.
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, amount) VALUES ('o-2', 1)`); err != nil {
			t.Fatalf("tx after ErrLeaseLost: %v", err)
		}
		for what, bad := range map[string]*retrysafe.ExtendParams{
			"no checkpoint": {Scope: p.Scope, Key: p.Key, Token: p.Token, Now: base, Lease: time.Minute},
			"no lease":      {Scope: p.Scope, Key: p.Key, Token: p.Token, Now: base, Checkpoint: &retrysafe.Checkpoint{Name: "x"}},
			"empty name":    {Scope: p.Scope, Key: p.Key, Token: p.Token, Now: base, Lease: time.Minute, Checkpoint: &retrysafe.Checkpoint{}},
			"too much data": {Scope: p.Scope, Key: p.Key, Token: p.Token, Now: base, Lease: time.Minute,
				Checkpoint: &retrysafe.Checkpoint{Name: "x", Data: make([]byte, retrysafe.CheckpointStoreLimit+1)}},
		} {
			if err := s.CheckpointTx(ctx, tx, bad); err == nil || errors.Is(err, retrysafe.ErrLeaseLost) {
				t.Errorf("CheckpointTx with %s = %v, want an error saying so", what, err)
			}
		}
	})
}

// TestBatchTakeoverPolicy: claims of one expired, abandoned record in one
// batch, with every takeover policy (those that may not take over queued
// first), and an extension with an abandon and a checkpoint in the same
// batch. Each claim decides as it would alone, in the batch's order: the
// NoTakeover claims and those naming another token see the abandoned
// record and leave it, the first claim that may take over wins (with the
// checkpoint), and the claims after it see the winner's record.
func TestBatchTakeoverPolicy(t *testing.T) {
	t.Parallel()
	s, plain := openBatchStore(t)
	ctx := context.Background()
	stale := claimParams("stale", "fp", base.Add(-time.Hour))
	mustClaim(t, s, stale)
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: stale.Scope, Key: stale.Key, Token: stale.Token, Now: stale.Now,
		Lease: stale.Lease, Abandon: true, Checkpoint: &retrysafe.Checkpoint{Name: "charged", Data: []byte("ch_1")}}); err != nil {
		t.Fatal(err)
	}
	live := claimParams("live", "fp", base)
	mustClaim(t, s, live)

	const n = 16
	params := make([]*retrysafe.ClaimParams, n)
	results := make([]*retrysafe.ClaimResult, n)
	var calls []func() error
	for i := range n {
		p := claimParams("stale", "fp", base)
		switch {
		case i < n/4:
			p.NoTakeover = true
			p.TakeoverToken = stale.Token // NoTakeover wins
		case i < n/2:
			p.TakeoverToken = retrysafe.NewToken()
		case i%2 == 0:
			p.TakeoverToken = stale.Token
		}
		params[i] = p
		calls = append(calls, func() (err error) {
			results[i], err = s.Claim(ctx, p)
			return err
		})
	}
	calls = append(calls, func() error {
		return s.Extend(ctx, &retrysafe.ExtendParams{Scope: live.Scope, Key: live.Key, Token: live.Token, Now: base, Lease: time.Hour,
			Abandon: true, Checkpoint: &retrysafe.Checkpoint{Name: "sent"}})
	})
	unlock, plugErr := plugWriter(t, s, plain)
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		// One at a time, so that they queue (and run) in this order.
		wg.Go(func() { errs[i] = call() })
		waitFor(t, fmt.Sprintf("%d writes are queued", i+1), func() bool { return s.QueuedWrites() == i+1 })
	}
	unlock()
	wg.Wait()
	if err := <-plugErr; err != nil {
		t.Fatalf("plug: %v", err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	winner := -1
	for i, res := range results {
		if !res.Claimed {
			continue
		}
		if winner >= 0 {
			t.Fatalf("claims %d and %d both won", winner, i)
		}
		winner = i
		if p := params[i]; p.NoTakeover || (p.TakeoverToken != "" && p.TakeoverToken != stale.Token) {
			t.Fatalf("claim %d won, but its policy (NoTakeover %v, TakeoverToken ours %v) forbids the takeover",
				i, p.NoTakeover, p.TakeoverToken == stale.Token)
		}
		if cp := res.Record.Checkpoint; res.Record.Attempt != 2 || res.Record.Abandoned || cp == nil || cp.Name != "charged" || string(cp.Data) != "ch_1" {
			t.Fatalf("the takeover returned attempt %d, abandoned %v, checkpoint %+v", res.Record.Attempt, res.Record.Abandoned, cp)
		}
	}
	if winner != n/2 {
		t.Fatalf("claim %d took the record over, want claim %d, the first that may", winner, n/2)
	}
	for i, res := range results {
		switch {
		case i < winner && (res.Record.Token != stale.Token || !res.Record.Abandoned):
			t.Errorf("claim %d (before the takeover) saw token %.8s abandoned %v, want the stale, abandoned record", i, res.Record.Token, res.Record.Abandoned)
		case i > winner && res.Record.Token != params[winner].Token:
			t.Errorf("claim %d (after the takeover) saw token %.8s, want the winner's", i, res.Record.Token)
		}
	}
	rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: live.Scope, Key: live.Key, Now: base})
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Abandoned || !rec.LeaseUntil.Equal(base.Add(live.Lease)) || rec.Checkpoint == nil || rec.Checkpoint.Name != "sent" {
		t.Errorf("the batched abandon with a checkpoint left %+v (checkpoint %+v)", rec, rec.Checkpoint)
	}
}
