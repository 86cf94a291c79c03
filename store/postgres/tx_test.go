package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/retrysafe/retrysafe"
)

// TestCompleteTx: the business row and the completion commit together; when
// the transaction rolls back neither exists, and after the owner releases
// (or its lease runs out) a retry claims the key and runs again.
func TestCompleteTx(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	pool := sharedPool(t)
	s := newStoreOn(t, pool, schema)
	ctx := t.Context()
	payments := pgx.Identifier{schema, "payments"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+payments+" (id text PRIMARY KEY, amount int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	resp := &retrysafe.Response{Status: 201, Body: []byte(`{"id":"pay_1"}`)}
	// charge runs the handler: the business insert and the completion in one
	// transaction, committed or rolled back.
	charge := func(p *retrysafe.ClaimParams, commit bool) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(ctx, "INSERT INTO "+payments+" (id, amount) VALUES ($1, 1000)", "pay_"+p.Key); err != nil {
			t.Fatal(err)
		}
		if err := s.CompleteTx(ctx, tx, &retrysafe.CompleteParams{Scope: scope, Key: p.Key, Token: p.Token, Now: at(1), TTL: ttl, Response: resp}); err != nil {
			t.Fatalf("CompleteTx: %v", err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		} else if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
	paymentExists := func(key string) bool {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+payments+" WHERE id = $1", "pay_"+key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	t.Run("commit", func(t *testing.T) {
		p := claimP("commit", fpA, at(0))
		mustClaim(t, s, p)
		charge(p, true)
		rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "commit", Now: at(2)})
		if err != nil || rec.State != retrysafe.StateCompleted || rec.Response.Status != 201 || !paymentExists("commit") {
			t.Fatalf("after commit: record %+v, %v; payment exists %v", rec, err, paymentExists("commit"))
		}
		if res := mustClaim(t, s, claimP("commit", fpA, at(3))); res.Claimed || res.Record.State != retrysafe.StateCompleted {
			t.Fatalf("retry after commit was not a replay: %+v", res)
		}
	})

	t.Run("rollback", func(t *testing.T) {
		p := claimP("rollback", fpA, at(0))
		mustClaim(t, s, p)
		charge(p, false)
		rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "rollback", Now: at(2)})
		if err != nil || rec.State != retrysafe.StateProcessing || rec.Token != p.Token || paymentExists("rollback") {
			t.Fatalf("after rollback: record %+v, %v; payment exists %v", rec, err, paymentExists("rollback"))
		}
		// The engine releases a record whose handler failed; the retry
		// then claims anew and runs again, this time committing.
		if err := s.Release(ctx, &retrysafe.ReleaseParams{Scope: scope, Key: "rollback", Token: p.Token}); err != nil {
			t.Fatal(err)
		}
		retry := claimP("rollback", fpA, at(3))
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
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		err = s.CompleteTx(ctx, tx, &retrysafe.CompleteParams{Scope: scope, Key: "lost", Token: "not-the-owner", Now: at(1), TTL: ttl, Response: resp})
		if !errors.Is(err, retrysafe.ErrLeaseLost) {
			t.Fatalf("CompleteTx with a stale token: %v, want ErrLeaseLost", err)
		}
		var one int
		if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("transaction after ErrLeaseLost: %v", err)
		}
	})
}
