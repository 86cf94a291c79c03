package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// TestClaimAtBoundaries: a claim of an existing key is decided first in Go
// (is the record one that may be taken over?) and then by the upsert's
// WHERE in SQL. The two must agree to the nanosecond: a lease or a TTL
// ends exactly at its instant (lease_until <= now, expires_at <= now), one
// nanosecond earlier the record still blocks, and a takeover needs the
// same fingerprint.
func TestClaimAtBoundaries(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()

	// A processing record whose lease ends at base+30s.
	first := claimParams("leased", "fp", base)
	mustClaim(t, s, first)
	for _, tc := range []struct {
		name    string
		fp      string
		at      time.Time
		claimed bool
	}{
		{"lease running, 1ns before its end", "fp", base.Add(30*time.Second - time.Nanosecond), false},
		{"lease ended, other fingerprint", "other", base.Add(30 * time.Second), false},
		{"lease ended exactly now, same fingerprint", "fp", base.Add(30 * time.Second), true},
	} {
		res := mustClaim(t, s, claimParams("leased", tc.fp, tc.at))
		if res.Claimed != tc.claimed {
			t.Fatalf("%s: Claimed = %v, want %v", tc.name, res.Claimed, tc.claimed)
		}
		if tc.claimed && (res.Record.Attempt != 2 || !res.Record.CreatedAt.Equal(base)) {
			t.Fatalf("%s: takeover record attempt %d created %v, want 2 and %v", tc.name, res.Record.Attempt, res.Record.CreatedAt, base)
		}
		if !tc.claimed && (res.Record.State != retrysafe.StateProcessing || res.Record.Token != first.Token) {
			t.Fatalf("%s: blocked by %+v, want the first claim's processing record", tc.name, res.Record)
		}
	}

	// A completed record that expires at base+1h.
	p := claimParams("done", "fp", base)
	mustClaim(t, s, p)
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: p.Scope, Key: p.Key, Token: p.Token, Now: base,
		TTL: time.Hour, Response: &retrysafe.Response{Status: 201}}); err != nil {
		t.Fatal(err)
	}
	res := mustClaim(t, s, claimParams("done", "other", base.Add(time.Hour-time.Nanosecond)))
	if res.Claimed || res.Record.State != retrysafe.StateCompleted {
		t.Fatalf("1ns before expiry: %+v, want the completed record", res)
	}
	res = mustClaim(t, s, claimParams("done", "other", base.Add(time.Hour)))
	if !res.Claimed || res.Record.Attempt != 1 || !res.Record.CreatedAt.Equal(base.Add(time.Hour)) || res.Record.Fingerprint != "other" {
		t.Fatalf("at expiry: %+v, want a new claim (attempt 1, created now)", res)
	}
}
