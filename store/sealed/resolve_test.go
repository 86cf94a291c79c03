package sealed_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// storedResolver is what an operator's tool looks for on a wrapped store.
type storedResolver interface {
	CompleteStored(context.Context, *retrysafe.CompleteParams) error
	ReleaseStored(context.Context, *retrysafe.ReleaseParams) error
}

// TestCompleteStored: an operator completes a record found through Admin
// (its scope as stored, the HMAC), and the caller then gets that answer
// through the wrapper, decrypted; Complete with the stored scope would
// miss the record. The write is fenced like Complete.
func TestCompleteStored(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, withRing := range []bool{true, false} {
		inner := memory.New(memory.Config{})
		t.Cleanup(func() { inner.Close() })
		var ring *sealed.KeyRing
		if withRing {
			ring = testRing(t, "k1")
		}
		s := wrap(t, inner, ring, sealed.Config{})
		scope := retrysafe.HashScope("Bearer alice")
		now := time.Now()
		for _, key := range []string{"k-complete", "k-release"} {
			if _, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: scope, Key: key, Fingerprint: "fp", Token: "tok-" + key, Now: now, Lease: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		admin, _ := retrysafe.As[retrysafe.Admin](s)
		recs, err := admin.Find(ctx, &retrysafe.FindParams{Key: "k-complete"})
		if err != nil || len(recs) != 1 {
			t.Fatalf("Find = %v, %v", recs, err)
		}
		rec := recs[0]
		if withRing && rec.Scope == scope {
			t.Fatal("the stored scope is the caller's: the test proves nothing")
		}
		rs, ok := admin.(storedResolver)
		if !ok {
			t.Fatal("the wrapper's Admin has no CompleteStored/ReleaseStored")
		}
		resp := &retrysafe.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":1}`)}
		if err := rs.CompleteStored(ctx, &retrysafe.CompleteParams{Scope: rec.Scope, Key: rec.Key, Token: "wrong", Now: now, TTL: time.Hour, Response: resp}); !errors.Is(err, retrysafe.ErrLeaseLost) {
			t.Fatalf("CompleteStored with a wrong token = %v, want ErrLeaseLost", err)
		}
		if err := rs.CompleteStored(ctx, &retrysafe.CompleteParams{Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Now: now, TTL: time.Hour, Response: resp}); err != nil {
			t.Fatalf("CompleteStored: %v", err)
		}
		got, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "k-complete", Now: now})
		if err != nil || got.State != retrysafe.StateCompleted || string(got.Response.Body) != `{"id":1}` {
			t.Fatalf("ring %v: the caller reads %+v, %v; want the operator's answer", withRing, got, err)
		}
		recs, _ = admin.Find(ctx, &retrysafe.FindParams{Key: "k-release"})
		if err := rs.ReleaseStored(ctx, &retrysafe.ReleaseParams{Scope: recs[0].Scope, Key: "k-release", Token: recs[0].Token}); err != nil {
			t.Fatalf("ReleaseStored: %v", err)
		}
		if _, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "k-release", Now: now}); !errors.Is(err, retrysafe.ErrNotFound) {
			t.Fatalf("after ReleaseStored, Get = %v, want ErrNotFound", err)
		}
	}
}
