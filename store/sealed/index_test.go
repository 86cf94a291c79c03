package sealed_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// storedRecords returns every record the inner store keeps.
func storedRecords(t *testing.T, inner *memory.Store) []*retrysafe.Record {
	t.Helper()
	recs, err := inner.List(t.Context(), &admin.ListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestStoredScopeAndFingerprint: with a ring, the store keeps neither the
// scope (an unsalted SHA-256 of a credential, which a word list reverses)
// nor the fingerprint (an unsalted SHA-256 of the request) in the clear,
// nor their SHA-256: a keyed form of each, equal for equal inputs, and
// another for another HMAC secret. Claim and Get still give the caller
// its own scope and fingerprint back.
func TestStoredScopeAndFingerprint(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	scope := scopehash.Sum("Basic YWxpY2U6aHVudGVyMg==") // alice:hunter2
	fp := retrysafe.Fingerprint("POST", "/transfers", "", []byte(`{"to":"bob","amount":100}`), nil)
	inner := memory.New(memory.Config{})
	t.Cleanup(func() { inner.Close() })
	ring := testRing(t, "k1")
	s := wrap(t, inner, ring, sealed.Config{})

	for _, key := range []string{"t-1", "t-2"} {
		res, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: scope, Key: key, Fingerprint: fp, Token: retrysafe.NewToken(), Now: now, Lease: time.Minute})
		if err != nil || !res.Claimed || res.Record.Scope != scope || res.Record.Fingerprint != fp {
			t.Fatalf("Claim %s: %+v, %v; want claimed with the caller's scope and fingerprint", key, res, err)
		}
		rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: key, Now: now})
		if err != nil || rec.Scope != scope || rec.Fingerprint != fp {
			t.Fatalf("Get %s: %+v, %v; want the caller's scope and fingerprint", key, rec, err)
		}
	}
	recs := storedRecords(t, inner)
	if len(recs) != 2 {
		t.Fatalf("%d stored records, want 2", len(recs))
	}
	for _, rec := range recs {
		for what, got := range map[string]string{"scope": rec.Scope, "fingerprint": rec.Fingerprint} {
			for _, clear := range []string{scope, fp, sha256Hex(scope), sha256Hex(fp)} {
				if got == clear || strings.Contains(got, clear) {
					t.Errorf("stored %s %q holds %q in the clear", what, got, clear)
				}
			}
		}
	}
	if recs[0].Scope != recs[1].Scope || recs[0].Fingerprint != recs[1].Fingerprint {
		t.Errorf("equal scopes or fingerprints stored differently: %q %q, %q %q", recs[0].Scope, recs[1].Scope, recs[0].Fingerprint, recs[1].Fingerprint)
	}
	if recs[0].Scope != ring.Scope(scope) {
		t.Errorf("stored scope %q, want KeyRing.Scope %q", recs[0].Scope, ring.Scope(scope))
	}

	// Another HMAC secret keeps the same scope and fingerprint otherwise,
	// and does not see the records kept under the first.
	otherRing, err := sealed.NewKeyRing(newKey(sealed.HMACKeyID), newKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	if otherRing.Scope(scope) == ring.Scope(scope) {
		t.Error("two HMAC secrets give the same stored scope")
	}
	otherInner := memory.New(memory.Config{})
	t.Cleanup(func() { otherInner.Close() })
	other := wrap(t, otherInner, otherRing, sealed.Config{})
	if _, err := other.Claim(ctx, &retrysafe.ClaimParams{Scope: scope, Key: "t-1", Fingerprint: fp, Token: retrysafe.NewToken(), Now: now, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if got := storedRecords(t, otherInner); got[0].Scope == recs[0].Scope || got[0].Fingerprint == recs[0].Fingerprint {
		t.Errorf("another HMAC secret stored scope %q and fingerprint %q, the same as the first", got[0].Scope, got[0].Fingerprint)
	}
	if got := ring.Scope(""); got != "" {
		t.Errorf("Scope(\"\") = %q, want the empty scope kept as such", got)
	}
}

// TestRotationKeepsScopesAndFingerprints: appending an encryption key
// changes neither the stored scope nor the stored fingerprint, so after a
// rotation a retry still finds its record and replays it (Do runs the
// function once), a different request with the same key is still a
// mismatch, and an expired lease is still taken over by the same request.
func TestRotationKeepsScopesAndFingerprints(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	inner := memory.New(memory.Config{})
	t.Cleanup(func() { inner.Close() })
	k1, k2 := newKey("2026-06"), newKey("2026-11")
	before := wrap(t, inner, ringOf(t, k1), sealed.Config{})
	after := wrap(t, inner, ringOf(t, k1, k2), sealed.Config{})

	runs := 0
	pay := func(ctx context.Context) (string, error) { runs++; return "paid", nil }
	if got, err := retrysafe.Do(ctx, before, "pay-1", "fp-1", pay); err != nil || got != "paid" {
		t.Fatalf("Do before the rotation: %q, %v", got, err)
	}
	if got, err := retrysafe.Do(ctx, after, "pay-1", "fp-1", pay); err != nil || got != "paid" || runs != 1 {
		t.Fatalf("Do after the rotation: %q, %v, %d runs; want the replay, 1 run", got, err, runs)
	}
	if _, err := retrysafe.Do(ctx, after, "pay-1", "fp-other", pay); !errors.Is(err, retrysafe.ErrMismatch) || runs != 1 {
		t.Fatalf("Do of another request after the rotation: %v, %d runs; want ErrMismatch, 1 run", err, runs)
	}

	claim := func(s retrysafe.Store, fp string, at time.Time) *retrysafe.ClaimResult {
		t.Helper()
		res, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: scopeA, Key: "lease", Fingerprint: fp, Token: retrysafe.NewToken(), Now: at, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	claim(before, "fp-1", now)
	later := now.Add(2 * time.Minute)
	if res := claim(after, "fp-2", later); res.Claimed || res.Record.Fingerprint == "fp-2" {
		t.Fatalf("takeover with another fingerprint after the rotation: %+v; want refused", res)
	}
	if res := claim(after, "fp-1", later); !res.Claimed || res.Record.Attempt != 2 || res.Record.Fingerprint != "fp-1" {
		t.Fatalf("takeover with the same fingerprint after the rotation: %+v; want attempt 2", res)
	}
}

// TestAcceptPlaintextFindsClearRecords: with AcceptPlaintext, a request
// that began before encryption was turned on (its record kept under the
// scope in the clear) is found: a duplicate is refused while it runs, its
// owner completes it through the wrapper, and the retry replays it.
func TestAcceptPlaintextFindsClearRecords(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	inner := memory.New(memory.Config{})
	t.Cleanup(func() { inner.Close() })
	owner := &retrysafe.ClaimParams{Scope: scopeA, Key: "k", Fingerprint: "fp", Token: retrysafe.NewToken(), Now: now, Lease: time.Minute}
	if res, err := inner.Claim(ctx, owner); err != nil || !res.Claimed {
		t.Fatalf("claim in the clear: %+v, %v", res, err)
	}
	s := wrap(t, inner, testRing(t, "k1"), sealed.Config{AcceptPlaintext: true})
	dup, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: scopeA, Key: "k", Fingerprint: "fp", Token: retrysafe.NewToken(), Now: now, Lease: time.Minute})
	if err != nil || dup.Claimed || dup.Record.Token != owner.Token {
		t.Fatalf("duplicate of a request running in the clear: %+v, %v; want the owner's record, not claimed", dup, err)
	}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: scopeA, Key: "k", Token: owner.Token, Now: now, TTL: time.Hour, Response: payment()}); err != nil {
		t.Fatalf("the owner's Complete through the wrapper: %v", err)
	}
	rec, err := claimExisting(s, ctx, scopeA, "k")
	if err != nil {
		t.Fatal(err)
	}
	wantResponse(t, "replay of a record completed in the clear's place", rec.Response, payment())
	if rec.Scope != scopeA || rec.Fingerprint != "fp" {
		t.Errorf("replay scope %q, fingerprint %q; want the caller's", rec.Scope, rec.Fingerprint)
	}
	if recs := storedRecords(t, inner); len(recs) != 1 {
		t.Errorf("%d stored records, want the one in the clear", len(recs))
	}
}

// TestAdmin: Admin shows the stored scope (KeyRing.Scope, the HMAC) and
// the stored fingerprint, and takes the scope it shows: List and Find in
// it, Delete of it. Stats counts as the inner store does.
func TestAdmin(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	inner := memory.New(memory.Config{})
	t.Cleanup(func() { inner.Close() })
	ring := testRing(t, "k1")
	s := wrap(t, inner, ring, sealed.Config{})
	complete(t, s, scopeA, "a", payment())
	complete(t, s, scopeB, "a", payment())
	complete(t, s, "", "a", payment())
	adm, ok := retrysafe.As[admin.Admin](s)
	if !ok {
		t.Fatal("no Admin")
	}
	shown := ring.Scope(scopeA)
	recs, err := adm.List(ctx, &admin.ListParams{Scope: shown, WithBodies: true})
	if err != nil || len(recs) != 1 || recs[0].Scope != shown || recs[0].Fingerprint == "fp" {
		t.Fatalf("List of the shown scope: %v, %v; want one record, scope %q, fingerprint as stored", recs, err, shown)
	}
	wantResponse(t, "listed", recs[0].Response, payment())
	if recs, err := adm.List(ctx, &admin.ListParams{ScopeSet: true}); err != nil || len(recs) != 1 || recs[0].Scope != "" {
		t.Fatalf("List of the empty scope: %v, %v", recs, err)
	}
	found, err := adm.Find(ctx, &admin.FindParams{Key: "a"})
	if err != nil || len(found) != 3 {
		t.Fatalf("Find of a: %d records, %v; want 3", len(found), err)
	}
	if err := adm.Delete(ctx, shown, "a"); err != nil {
		t.Fatalf("Delete of the shown scope: %v", err)
	}
	if _, err := get(s, ctx, scopeA, "a"); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	st, err := adm.Stats(ctx, &admin.StatsParams{Now: now})
	if err != nil || st.Completed != 2 {
		t.Fatalf("Stats: %+v, %v; want 2 completed", st, err)
	}
}

// TestEmptyScopeFingerprint: the empty scope is kept as it is, but its
// fingerprints are still keyed and given back: a duplicate of an
// anonymous request in flight is not taken for another request.
func TestEmptyScopeFingerprint(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := wrap(t, memory.New(memory.Config{}), testRing(t, "k1"), sealed.Config{})
	p := &retrysafe.ClaimParams{Scope: "", Key: "anon", Fingerprint: "fp-anon", Token: retrysafe.NewToken(), Now: now, Lease: time.Minute}
	if res, err := s.Claim(ctx, p); err != nil || !res.Claimed || res.Record.Fingerprint != "fp-anon" {
		t.Fatalf("claim in the empty scope: %+v, %v", res, err)
	}
	dup := *p
	dup.Token = retrysafe.NewToken()
	res, err := s.Claim(ctx, &dup)
	if err != nil || res.Claimed || res.Record.Fingerprint != "fp-anon" || res.Record.Scope != "" {
		t.Fatalf("duplicate in the empty scope: %+v, %v; want the in-flight record with the caller's fingerprint", res, err)
	}
}
