package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

func claimScenarios() []scenario {
	return []scenario{
		{"ClaimNew", testClaimNew},
		{"ConcurrentClaims", testConcurrentClaims},
		{"ClaimLiveProcessing", testClaimLiveProcessing},
		{"LeaseExpiryTakeover", testLeaseExpiryTakeover},
		{"ConcurrentTakeover", testConcurrentTakeover},
		{"ConcurrentClaimsAfterExpiry", testConcurrentClaimsAfterExpiry},
		{"Mismatch", testMismatch},
		{"Release", testRelease},
		{"TTLOnRead", testTTLOnRead},
		{"Scopes", testScopes},
	}
}

// testClaimNew: a claim of an absent key creates a processing record owned
// by the claimant, and Get returns the same record.
func testClaimNew(t *testing.T, h *harness) {
	now := at(0)
	p, rec := h.claimNew(scope1, "order-1", fpA, now)
	checkProcessing(t, rec, p, 1, now)

	got := h.get(scope1, "order-1", now)
	checkProcessing(t, got, p, 1, now)

	// A read later in the lease, or after it, still returns the record:
	// expiry of a lease is not expiry of the record.
	got = h.get(scope1, "order-1", now.Add(time.Hour))
	checkProcessing(t, got, p, 1, now)
}

// claimRace runs n claims of scope/key at once, released together by a
// start barrier, through the stores in turn, and returns their results.
// Every claim uses its own token. It fails the test on any error.
func claimRace(t *testing.T, h *harness, stores []retrysafe.Store, n int, scope, key, fp string, now time.Time) ([]*retrysafe.ClaimParams, []*retrysafe.ClaimResult) {
	t.Helper()
	params := make([]*retrysafe.ClaimParams, n)
	for i := range params {
		params[i] = claimParams(scope, key, fp, now)
	}
	return params, raceClaims(t, h, stores, params)
}

// raceClaims runs the claims of params at once, released together by a
// start barrier, through the stores in turn, and returns their results.
// It fails the test on any error.
func raceClaims(t *testing.T, h *harness, stores []retrysafe.Store, params []*retrysafe.ClaimParams) []*retrysafe.ClaimResult {
	t.Helper()
	n := len(params)
	results := make([]*retrysafe.ClaimResult, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range n {
		ready.Add(1)
		done.Go(func() {
			s := stores[i%len(stores)]
			ready.Done()
			<-start
			results[i], errs[i] = s.Claim(h.ctx, params[i])
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Claim %d of %d (store %d): unexpected error: %v", i, n, i%len(stores), err)
		}
		if results[i] == nil || results[i].Record == nil {
			t.Fatalf("concurrent Claim %d of %d returned a nil result or record", i, n)
		}
	}
	return results
}

// oneWinner checks that exactly one of the results claimed the record and
// that every loser was handed the winner's record. It returns the winner's
// index.
func oneWinner(t *testing.T, round int, params []*retrysafe.ClaimParams, results []*retrysafe.ClaimResult) int {
	t.Helper()
	winner := -1
	for i, res := range results {
		if !res.Claimed {
			continue
		}
		if winner >= 0 {
			t.Fatalf("round %d: claims %d and %d both won (tokens %s and %s): the claim is not atomic",
				round, winner, i, short(params[winner].Token), short(params[i].Token))
		}
		winner = i
	}
	if winner < 0 {
		t.Fatalf("round %d: no claim won among %d concurrent claims; first result: %s", round, len(results), describe(results[0].Record))
	}
	want := params[winner].Token
	if got := results[winner].Record.Token; got != want {
		t.Fatalf("round %d: the winner's record has token %s, want its own token %s", round, short(got), short(want))
	}
	for i, res := range results {
		if i != winner && res.Record.Token != want {
			t.Fatalf("round %d: loser %d got a record with token %s, want the winner's token %s",
				round, i, short(res.Record.Token), short(want))
		}
	}
	return winner
}

// testConcurrentClaims: among 100 concurrent claims of one absent key,
// exactly one wins, and every loser is handed the winner's record.
func testConcurrentClaims(t *testing.T, h *harness) {
	const rounds, claimants = 50, 100
	for round := range rounds {
		key := fmt.Sprintf("race-%03d", round)
		params, results := claimRace(t, h, []retrysafe.Store{h.s}, claimants, scope1, key, fpA, at(0))
		w := oneWinner(t, round, params, results)
		checkProcessing(t, results[w].Record, params[w], 1, at(0))
		for i, res := range results {
			if i != w && res.Record.State != retrysafe.StateProcessing {
				t.Fatalf("round %d: loser %d got a record in state %q, want processing", round, i, res.Record.State)
			}
		}
	}
}

// testClaimLiveProcessing: a claim of a record whose lease is live does not
// win and changes nothing, whatever its fingerprint.
func testClaimLiveProcessing(t *testing.T, h *harness) {
	_, orig := h.claimNew(scope1, "k", fpA, at(0))
	for _, tc := range []struct {
		name string
		fp   string
		now  time.Time
	}{
		{"same fingerprint, same instant", fpA, at(0)},
		{"same fingerprint, one second before lease end", fpA, at(lease - time.Second)},
		{"other fingerprint", fpB, at(time.Second)},
	} {
		got := h.claimBlocked(scope1, "k", tc.fp, tc.now)
		checkSameRecord(t, tc.name+": returned record", got, orig)
		checkSameRecord(t, tc.name+": stored record", h.get(scope1, "k", tc.now), orig)
	}
}

// testLeaseExpiryTakeover: once Now >= LeaseUntil, a claim with the same
// fingerprint takes the record over (new token, Attempt+1, CreatedAt kept);
// a claim with another fingerprint does not.
func testLeaseExpiryTakeover(t *testing.T, h *harness) {
	_, orig := h.claimNew(scope1, "k", fpA, at(0))

	// A different fingerprint never takes over, even after the lease.
	other := h.claimBlocked(scope1, "k", fpB, at(lease))
	checkSameRecord(t, "record returned to a claim with another fingerprint", other, orig)
	checkSameRecord(t, "stored record after a claim with another fingerprint", h.get(scope1, "k", at(lease)), orig)

	// Exactly at LeaseUntil the lease has run out.
	p2, rec2 := h.claimNew(scope1, "k", fpA, at(lease))
	checkProcessing(t, rec2, p2, 2, at(0))
	checkProcessing(t, h.get(scope1, "k", at(lease)), p2, 2, at(0))

	// The new lease is live: nobody takes it over before it ends.
	checkSameRecord(t, "record after a claim during the new lease",
		h.claimBlocked(scope1, "k", fpA, at(lease+time.Second)), rec2)

	// A third takeover, with a longer lease, counts on.
	p3 := claimParams(scope1, "k", fpA, at(3*lease))
	p3.Lease = 2 * time.Minute
	res, err := h.s.Claim(h.ctx, p3)
	if err != nil {
		t.Fatalf("third claim: %v", err)
	}
	if !res.Claimed {
		t.Fatalf("third claim after the second lease ran out: Claimed=false; record %s", describe(res.Record))
	}
	checkProcessing(t, res.Record, p3, 3, at(0))
}

// testConcurrentTakeover: among concurrent claims of a record whose lease
// ran out, exactly one takes it over.
func testConcurrentTakeover(t *testing.T, h *harness) {
	const rounds, claimants = 20, 50
	for round := range rounds {
		key := fmt.Sprintf("takeover-%03d", round)
		h.claimNew(scope1, key, fpA, at(0))
		params, results := claimRace(t, h, []retrysafe.Store{h.s}, claimants, scope1, key, fpA, at(lease))
		w := oneWinner(t, round, params, results)
		checkProcessing(t, results[w].Record, params[w], 2, at(0))
	}
}

// testConcurrentClaimsAfterExpiry: among concurrent claims of a completed
// record past ExpiresAt, exactly one wins and starts a new record.
func testConcurrentClaimsAfterExpiry(t *testing.T, h *harness) {
	const rounds, claimants = 20, 50
	for round := range rounds {
		key := fmt.Sprintf("expired-%03d", round)
		p, _ := h.claimNew(scope1, key, fpA, at(0))
		h.mustComplete(scope1, key, p.Token, at(time.Second), sampleResponse())
		now := at(time.Second + ttl)
		params, results := claimRace(t, h, []retrysafe.Store{h.s}, claimants, scope1, key, fpA, now)
		w := oneWinner(t, round, params, results)
		checkProcessing(t, results[w].Record, params[w], 1, now)
	}
}

// testMismatch: a claim with another fingerprint on a completed record does
// not win and is handed the original fingerprint, so the engine can answer
// 422; the stored record is unchanged.
func testMismatch(t *testing.T, h *harness) {
	p, _ := h.claimNew(scope1, "k", fpA, at(0))
	resp := sampleResponse()
	h.mustComplete(scope1, "k", p.Token, at(time.Second), resp)
	before := h.get(scope1, "k", at(2*time.Second))

	got := h.claimBlocked(scope1, "k", fpB, at(2*time.Second))
	if got.Fingerprint != fpA {
		t.Errorf("Fingerprint = %q, want the original %q", got.Fingerprint, fpA)
	}
	if got.State != retrysafe.StateCompleted {
		t.Errorf("State = %q, want completed", got.State)
	}
	checkResponse(t, "record returned to a mismatching claim", got.Response, resp)
	after := h.get(scope1, "k", at(2*time.Second))
	checkSameRecord(t, "stored record after a mismatching claim", after, before)
	checkResponse(t, "stored response after a mismatching claim", after.Response, resp)
}

// testRelease: the owner's Release deletes the record; the next claim
// starts afresh with attempt 1.
func testRelease(t *testing.T, h *harness) {
	p, _ := h.claimNew(scope1, "k", fpA, at(0))
	if err := h.release(scope1, "k", p.Token); err != nil {
		t.Fatalf("Release by the owner: %v", err)
	}
	h.getNotFound(scope1, "k", at(time.Second))

	// The next claim is new, even with another fingerprint and inside
	// what would have been the old lease.
	p2, rec := h.claimNew(scope1, "k", fpB, at(2*time.Second))
	checkProcessing(t, rec, p2, 1, at(2*time.Second))

	// A second Release by the first owner finds nothing it owns.
	wantLeaseLost(t, "second Release by the old owner", h.release(scope1, "k", p.Token))
	checkProcessing(t, h.get(scope1, "k", at(3*time.Second)), p2, 1, at(2*time.Second))
}

// testTTLOnRead: a completed record counts as absent from ExpiresAt on,
// without any sweeper running.
func testTTLOnRead(t *testing.T, h *harness) {
	p, _ := h.claimNew(scope1, "k", fpA, at(0))
	done := at(10 * time.Second)
	h.mustComplete(scope1, "k", p.Token, done, sampleResponse())
	expires := done.Add(ttl)

	// One second before ExpiresAt it still replays.
	rec := h.get(scope1, "k", expires.Add(-time.Second))
	checkTime(t, "ExpiresAt", rec.ExpiresAt, expires)
	h.claimBlocked(scope1, "k", fpA, expires.Add(-time.Second))

	// At ExpiresAt it is gone for readers...
	h.getNotFound(scope1, "k", expires)
	h.getNotFound(scope1, "k", expires.Add(time.Hour))

	// ...and a claim, even with another fingerprint, starts a new record.
	p2, rec2 := h.claimNew(scope1, "k", fpB, expires)
	checkProcessing(t, rec2, p2, 1, expires)
	checkProcessing(t, h.get(scope1, "k", expires), p2, 1, expires)

	// The old owner's token fences nothing of the new record.
	wantLeaseLost(t, "Complete with the expired record's token", h.complete(scope1, "k", p.Token, expires, sampleResponse()))
}

// testScopes: the same key in two scopes names two independent records.
func testScopes(t *testing.T, h *harness) {
	p1, _ := h.claimNew(scope1, "shared-key", fpA, at(0))
	p2, rec2 := h.claimNew(scope2, "shared-key", fpB, at(0))
	checkProcessing(t, rec2, p2, 1, at(0))

	// Tokens are fenced per scope.
	wantLeaseLost(t, "Complete in scope 2 with scope 1's token", h.complete(scope2, "shared-key", p1.Token, at(time.Second), sampleResponse()))
	h.mustComplete(scope1, "shared-key", p1.Token, at(time.Second), sampleResponse())
	checkProcessing(t, h.get(scope2, "shared-key", at(time.Second)), p2, 1, at(0))

	if err := h.release(scope2, "shared-key", p2.Token); err != nil {
		t.Fatalf("Release in scope 2: %v", err)
	}
	h.getNotFound(scope2, "shared-key", at(2*time.Second))
	if rec := h.get(scope1, "shared-key", at(2*time.Second)); rec.State != retrysafe.StateCompleted {
		t.Errorf("scope 1 record after releasing scope 2: state %q, want completed", rec.State)
	}

	// Concatenating scope and key must not make two pairs collide.
	pa, _ := h.claimNew("ab", "c", fpA, at(0))
	pb, recB := h.claimNew("a", "bc", fpA, at(0))
	checkProcessing(t, recB, pb, 1, at(0))
	if rec := h.get("ab", "c", at(0)); rec.Token != pa.Token {
		t.Errorf("record (ab, c) has token %s, want %s: it collides with (a, bc)", short(rec.Token), short(pa.Token))
	}
}
