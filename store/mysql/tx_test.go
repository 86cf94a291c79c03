package mysql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// TestCompleteTx: the business row and the completion commit together; when
// the transaction rolls back neither exists, and after the owner releases
// (or its lease runs out) a retry claims the key and runs again. A
// duplicate that arrives while the transaction is open is answered at once
// (it does not wait for the transaction's row lock).
func TestCompleteTx(t *testing.T) {
	t.Parallel()
	db := sharedDB(t)
	s := newStoreOn(t, db, newTable(t))
	ctx := t.Context()
	payments := "`" + s.Config().Table + "_payments`"
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+payments+" (id VARCHAR(255) PRIMARY KEY, amount INT NOT NULL) ENGINE = InnoDB"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+payments) })
	resp := &retrysafe.Response{Status: 201, Body: []byte(`{"id":"pay_1"}`)}
	// charge runs the handler: the business insert and the completion in one
	// transaction, committed or rolled back.
	charge := func(p *retrysafe.ClaimParams, commit bool) {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+payments+" (id, amount) VALUES (?, 1000)", "pay_"+p.Key); err != nil {
			t.Fatal(err)
		}
		if err := s.CompleteTx(ctx, tx, &retrysafe.CompleteParams{Scope: scope, Key: p.Key, Token: p.Token, Now: at(time.Second), TTL: ttl, Response: resp}); err != nil {
			t.Fatalf("CompleteTx: %v", err)
		}
		// A duplicate while the transaction holds the row: answered from
		// the committed (processing) record, without waiting.
		dupCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		dup, err := s.Claim(dupCtx, claimP(p.Key, fpA, at(2*time.Second)))
		if err != nil || dup.Claimed || dup.Record.State != retrysafe.StateProcessing || dup.Record.Token != p.Token {
			t.Fatalf("duplicate while CompleteTx's transaction is open: %+v, %v", dup, err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		} else if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
	paymentExists := func(key string) bool {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+payments+" WHERE id = ?", "pay_"+key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	t.Run("commit", func(t *testing.T) {
		p := claimP("commit", fpA, at(0))
		mustClaim(t, s, p)
		charge(p, true)
		rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "commit", Now: at(2 * time.Second)})
		if err != nil || rec.State != retrysafe.StateCompleted || rec.Response.Status != 201 || !paymentExists("commit") {
			t.Fatalf("after commit: record %+v, %v; payment exists %v", rec, err, paymentExists("commit"))
		}
		if res := mustClaim(t, s, claimP("commit", fpA, at(3*time.Second))); res.Claimed || res.Record.State != retrysafe.StateCompleted {
			t.Fatalf("retry after commit was not a replay: %+v", res)
		}
	})

	t.Run("rollback", func(t *testing.T) {
		p := claimP("rollback", fpA, at(0))
		mustClaim(t, s, p)
		charge(p, false)
		rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "rollback", Now: at(2 * time.Second)})
		if err != nil || rec.State != retrysafe.StateProcessing || rec.Token != p.Token || paymentExists("rollback") {
			t.Fatalf("after rollback: record %+v, %v; payment exists %v", rec, err, paymentExists("rollback"))
		}
		if err := s.Release(ctx, &retrysafe.ReleaseParams{Scope: scope, Key: "rollback", Token: p.Token}); err != nil {
			t.Fatal(err)
		}
		retry := claimP("rollback", fpA, at(3*time.Second))
		if res := mustClaim(t, s, retry); !res.Claimed || res.Record.Attempt != 1 {
			t.Fatalf("retry after rollback and release: %+v", res)
		}
		charge(retry, true)
		if !paymentExists("rollback") {
			t.Fatal("the retry's payment is missing")
		}
	})

	t.Run("rollback then lease expiry", func(t *testing.T) {
		p := claimP("abandoned", fpA, at(0))
		mustClaim(t, s, p)
		charge(p, false)
		retry := claimP("abandoned", fpA, at(lease))
		if res := mustClaim(t, s, retry); !res.Claimed || res.Record.Attempt != 2 {
			t.Fatalf("takeover after rollback: %+v", res)
		}
		charge(retry, true)
	})

	t.Run("lease lost leaves the transaction usable", func(t *testing.T) {
		p := claimP("lost", fpA, at(0))
		mustClaim(t, s, p)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		err = s.CompleteTx(ctx, tx, &retrysafe.CompleteParams{Scope: scope, Key: "lost", Token: "not-the-owner", Now: at(time.Second), TTL: ttl, Response: resp})
		if !errors.Is(err, retrysafe.ErrLeaseLost) {
			t.Fatalf("CompleteTx with a stale token: %v, want ErrLeaseLost", err)
		}
		var one int
		if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("transaction after ErrLeaseLost: %v", err)
		}
	})

	t.Run("takeover waits for the transaction and then loses", func(t *testing.T) {
		// The owner's lease ran out, but its CompleteTx holds the row:
		// a takeover waits for the commit and then finds the record
		// completed.
		p := claimP("held", fpA, at(0))
		mustClaim(t, s, p)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := s.CompleteTx(ctx, tx, &retrysafe.CompleteParams{Scope: scope, Key: "held", Token: p.Token, Now: at(lease), TTL: ttl, Response: resp}); err != nil {
			t.Fatal(err)
		}
		done := make(chan *retrysafe.ClaimResult, 1)
		go func() {
			res, err := s.Claim(ctx, claimP("held", fpA, at(lease+time.Second)))
			if err != nil {
				t.Errorf("takeover: %v", err)
			}
			done <- res
		}()
		select {
		case res := <-done:
			t.Fatalf("the takeover did not wait for the open transaction: %+v", res)
		case <-time.After(300 * time.Millisecond):
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		res := <-done
		if res == nil || res.Claimed || res.Record.State != retrysafe.StateCompleted || res.Record.Token != p.Token {
			t.Fatalf("takeover after the commit: %+v, want the completed record", res)
		}
	})
}
