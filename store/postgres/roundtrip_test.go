package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/postgres"
)

// TestOneRoundTripPerCall checks, on the wire, that Claim costs exactly one
// round trip in every state a key can be in, and Extend, Complete, Release
// and Get one each. Every statement is run once first, so that it is
// prepared on the (single) connection.
func TestOneRoundTripPerCall(t *testing.T) {
	t.Parallel()
	pool, c := benchPool(t, 1)
	s := newStoreOn(t, pool, newSchema(t))
	ctx := t.Context()
	resp := &retrysafe.Response{Status: 201, Body: []byte("ok")}
	complete := func(p *retrysafe.ClaimParams) error {
		return s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: p.Key, Token: p.Token, Now: p.Now, TTL: time.Hour, Response: resp})
	}
	// Warm up every statement.
	w := claimP("warm", fpA, at(0))
	mustClaim(t, s, w)
	_, _ = s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "warm", Now: at(0)})
	_ = s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope, Key: "warm", Token: w.Token, Now: at(0), Lease: lease})
	_ = complete(w)
	w2 := claimP("warm2", fpA, at(0))
	mustClaim(t, s, w2)
	_ = s.Release(ctx, &retrysafe.ReleaseParams{Scope: scope, Key: "warm2", Token: w2.Token})

	live := claimP("live", fpA, at(0))
	mustClaim(t, s, live)
	done := claimP("done", fpA, at(0))
	mustClaim(t, s, done)
	if err := complete(done); err != nil {
		t.Fatal(err)
	}

	measure := func(name string, call func() error) {
		t.Helper()
		c.reset()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if st, turns := c.statements.Load(), c.turns.Load(); st != 1 || turns != 1 {
			t.Errorf("%s: %d statements, %d wire round trips; want 1 and 1", name, st, turns)
		}
	}
	claim := func(key, fp string, now time.Time, wantClaimed bool) func() error {
		return func() error {
			res, err := s.Claim(ctx, claimP(key, fp, now))
			if err == nil && res.Claimed != wantClaimed {
				t.Errorf("Claim(%s) claimed=%v, want %v", key, res.Claimed, wantClaimed)
			}
			return err
		}
	}
	measure("Claim of a new key", claim("new", fpA, at(0), true))
	measure("Claim of a live lease", claim("live", fpA, at(time.Second), false))
	measure("Claim with another fingerprint", claim("live", fpB, at(lease), false))
	measure("Claim replaying a completed record", claim("done", fpA, at(time.Second), false))
	measure("Claim taking over an expired lease", claim("live", fpA, at(lease), true))
	measure("Claim replacing an expired completed record", claim("done", fpA, at(2*time.Hour), true))
	measure("Get", func() error {
		_, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "done", Now: at(0)})
		return err
	})
	p := claimP("fenced", fpA, at(0))
	mustClaim(t, s, p)
	measure("Extend", func() error {
		return s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope, Key: "fenced", Token: p.Token, Now: at(0), Lease: lease})
	})
	measure("Complete", func() error { return complete(p) })
	p = claimP("released", fpA, at(0))
	mustClaim(t, s, p)
	measure("Release", func() error {
		return s.Release(ctx, &retrysafe.ReleaseParams{Scope: scope, Key: "released", Token: p.Token})
	})
}

// TestReplayWritesNothing: a replay, and a claim blocked by a live lease,
// leave the row untouched (same xmin): they are reads, which take no lock
// and write no WAL.
func TestReplayWritesNothing(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	xmin := func(key string) string {
		t.Helper()
		var x string
		if err := s.Pool().QueryRow(ctx, "SELECT xmin::text FROM "+table(s)+" WHERE scope = $1 AND key = $2", scope, key).Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	live := claimP("live", fpA, at(0))
	mustClaim(t, s, live)
	done := claimP("done", fpA, at(0))
	mustClaim(t, s, done)
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "done", Token: done.Token, Now: at(0), TTL: ttl, Response: &retrysafe.Response{Status: 200}}); err != nil {
		t.Fatal(err)
	}
	before := map[string]string{"live": xmin("live"), "done": xmin("done")}
	for range 3 {
		mustClaim(t, s, claimP("done", fpA, at(time.Second)))
		mustClaim(t, s, claimP("done", fpB, at(time.Second)))
		mustClaim(t, s, claimP("live", fpA, at(time.Second)))
		mustClaim(t, s, claimP("live", fpB, at(lease)))
	}
	for key, x := range before {
		if got := xmin(key); got != x {
			t.Errorf("row %q was rewritten by blocked claims: xmin %s -> %s", key, x, got)
		}
	}
}

func table(s *postgres.Store) string {
	return pgx.Identifier{s.Config().Schema, s.Config().Table}.Sanitize()
}
