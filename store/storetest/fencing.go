package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

func fencingScenarios() []scenario {
	return []scenario{
		{"FencingAfterTakeover", testFencingAfterTakeover},
		{"FencingAbsentKey", testFencingAbsentKey},
		{"FencingCompleted", testFencingCompleted},
		{"Extend", testExtend},
		{"FinishAfterLeaseRanOut", testFinishAfterLeaseRanOut},
		{"CompleteRacesTakeover", testCompleteRacesTakeover},
	}
}

// testFencingAfterTakeover: after a takeover the old owner's Extend,
// Complete and Release fail with ErrLeaseLost and change nothing; the new
// owner's calls succeed.
func testFencingAfterTakeover(t *testing.T, h *harness) {
	old, _ := h.claimNew(scope1, "k", fpA, at(0))
	p2, rec2 := h.claimNew(scope1, "k", fpA, at(lease))
	now := at(lease + time.Second)

	wantLeaseLost(t, "Extend by the old owner", h.extend(scope1, "k", old.Token, now, time.Hour))
	wantLeaseLost(t, "Complete by the old owner", h.complete(scope1, "k", old.Token, now, sampleResponse()))
	wantLeaseLost(t, "Release by the old owner", h.release(scope1, "k", old.Token))
	checkSameRecord(t, "record after the old owner's fenced calls", h.get(scope1, "k", now), rec2)

	// A token nobody ever held is fenced too.
	wantLeaseLost(t, "Complete with an unknown token", h.complete(scope1, "k", retrysafe.NewToken(), now, sampleResponse()))
	wantLeaseLost(t, "Complete with an empty token", h.complete(scope1, "k", "", now, sampleResponse()))

	if err := h.extend(scope1, "k", p2.Token, now, lease); err != nil {
		t.Fatalf("Extend by the new owner: %v", err)
	}
	resp := sampleResponse()
	h.mustComplete(scope1, "k", p2.Token, now, resp)
	rec := h.get(scope1, "k", now)
	if rec.State != retrysafe.StateCompleted || rec.Token != p2.Token || rec.Attempt != 2 {
		t.Errorf("record after the new owner completed: %s, want completed, the new owner's token, attempt 2", describe(rec))
	}
	checkResponse(t, "stored response", rec.Response, resp)

	// The old owner still cannot touch the completed record.
	wantLeaseLost(t, "Release by the old owner after completion", h.release(scope1, "k", old.Token))
	checkResponse(t, "stored response after the old owner's Release", h.get(scope1, "k", now).Response, resp)
}

// testFencingAbsentKey: fenced calls on a key that has no record fail with
// ErrLeaseLost and create nothing.
func testFencingAbsentKey(t *testing.T, h *harness) {
	tok := retrysafe.NewToken()
	wantLeaseLost(t, "Extend of an absent key", h.extend(scope1, "absent", tok, at(0), lease))
	wantLeaseLost(t, "Complete of an absent key", h.complete(scope1, "absent", tok, at(0), sampleResponse()))
	wantLeaseLost(t, "Release of an absent key", h.release(scope1, "absent", tok))
	h.getNotFound(scope1, "absent", at(0))

	// A key whose completed record expired counts as absent too.
	p, _ := h.claimNew(scope1, "expired", fpA, at(0))
	h.mustComplete(scope1, "expired", p.Token, at(0), sampleResponse())
	wantLeaseLost(t, "Extend of an expired completed record", h.extend(scope1, "expired", p.Token, at(ttl), lease))
	h.getNotFound(scope1, "expired", at(ttl))
}

// testFencingCompleted: once completed, a record cannot be completed,
// extended or released again, not even by its owner: the first result
// stands.
func testFencingCompleted(t *testing.T, h *harness) {
	p, _ := h.claimNew(scope1, "k", fpA, at(0))
	first := sampleResponse()
	h.mustComplete(scope1, "k", p.Token, at(time.Second), first)
	before := h.get(scope1, "k", at(time.Second))

	second := &retrysafe.Response{Status: 500, Header: map[string][]string{"X-Second": {"yes"}}, Body: []byte("second")}
	wantLeaseLost(t, "second Complete by the owner", h.complete(scope1, "k", p.Token, at(2*time.Second), second))
	wantLeaseLost(t, "Extend of a completed record", h.extend(scope1, "k", p.Token, at(2*time.Second), lease))
	wantLeaseLost(t, "Release of a completed record", h.release(scope1, "k", p.Token))

	after := h.get(scope1, "k", at(2*time.Second))
	checkSameRecord(t, "completed record after fenced calls", after, before)
	checkResponse(t, "completed response after fenced calls", after.Response, first)
}

// testExtend: Extend moves LeaseUntil to Now+Lease and keeps the record
// owned; a claim inside the extended lease does not take over.
func testExtend(t *testing.T, h *harness) {
	p, rec := h.claimNew(scope1, "k", fpA, at(0))
	now := at(20 * time.Second)
	if err := h.extend(scope1, "k", p.Token, now, time.Minute); err != nil {
		t.Fatalf("Extend by the owner: %v", err)
	}
	got := h.get(scope1, "k", now)
	checkTime(t, "LeaseUntil after Extend", got.LeaseUntil, now.Add(time.Minute))
	if got.Token != p.Token || got.Attempt != 1 || got.State != retrysafe.StateProcessing || got.Fingerprint != fpA {
		t.Errorf("record after Extend: %s, want the same owner, attempt 1, processing", describe(got))
	}
	checkTime(t, "CreatedAt after Extend", got.CreatedAt, rec.CreatedAt)

	// The old lease end has passed, the extended one has not.
	h.claimBlocked(scope1, "k", fpA, at(lease+time.Second))

	// Extend may also shorten the lease.
	if err := h.extend(scope1, "k", p.Token, at(40*time.Second), time.Second); err != nil {
		t.Fatalf("second Extend: %v", err)
	}
	checkTime(t, "LeaseUntil after a shorter Extend", h.get(scope1, "k", at(40*time.Second)).LeaseUntil, at(41*time.Second))
	p2, rec2 := h.claimNew(scope1, "k", fpA, at(41*time.Second))
	checkProcessing(t, rec2, p2, 2, at(0))
}

// testFinishAfterLeaseRanOut: an owner whose lease ran out, but whom nobody
// took over, may still Extend and Complete.
func testFinishAfterLeaseRanOut(t *testing.T, h *harness) {
	p, _ := h.claimNew(scope1, "extend-late", fpA, at(0))
	late := at(lease + time.Minute)
	if err := h.extend(scope1, "extend-late", p.Token, late, lease); err != nil {
		t.Fatalf("Extend after the lease ran out (no takeover): %v", err)
	}
	checkTime(t, "LeaseUntil after a late Extend", h.get(scope1, "extend-late", late).LeaseUntil, late.Add(lease))

	p2, _ := h.claimNew(scope1, "complete-late", fpA, at(0))
	resp := sampleResponse()
	h.mustComplete(scope1, "complete-late", p2.Token, late, resp)
	rec := h.get(scope1, "complete-late", late)
	if rec.State != retrysafe.StateCompleted {
		t.Fatalf("record after a late Complete: state %q, want completed", rec.State)
	}
	checkResponse(t, "response after a late Complete", rec.Response, resp)

	p3, _ := h.claimNew(scope1, "release-late", fpA, at(0))
	if err := h.release(scope1, "release-late", p3.Token); err != nil {
		t.Fatalf("Release after the lease ran out (no takeover): %v", err)
	}
	h.getNotFound(scope1, "release-late", late)
}

// testCompleteRacesTakeover: an old owner completing at the moment another
// claimant takes over its expired lease. Exactly one of them gets the
// record: either the Complete succeeds and the claim sees the completed
// record, or the claim wins and the Complete fails with ErrLeaseLost.
func testCompleteRacesTakeover(t *testing.T, h *harness) {
	const rounds = 50
	for round := range rounds {
		key := fmt.Sprintf("race-%03d", round)
		old, _ := h.claimNew(scope1, key, fpA, at(0))
		now := at(lease)
		claim := claimParams(scope1, key, fpA, now)
		resp := sampleResponse()

		var (
			start       = make(chan struct{})
			wg          sync.WaitGroup
			completeErr error
			res         *retrysafe.ClaimResult
			claimErr    error
		)
		wg.Go(func() {
			<-start
			completeErr = h.complete(scope1, key, old.Token, now, resp)
		})
		wg.Go(func() {
			<-start
			res, claimErr = h.s.Claim(h.ctx, claim)
		})
		close(start)
		wg.Wait()

		if claimErr != nil {
			t.Fatalf("round %d: Claim: %v", round, claimErr)
		}
		rec := h.get(scope1, key, now)
		switch {
		case completeErr == nil:
			if res.Claimed {
				t.Fatalf("round %d: both the old owner's Complete and the takeover succeeded", round)
			}
			if rec.State != retrysafe.StateCompleted || rec.Token != old.Token {
				t.Fatalf("round %d: Complete won but the stored record is %s", round, describe(rec))
			}
			checkResponse(t, fmt.Sprintf("round %d: stored response", round), rec.Response, resp)
		case errors.Is(completeErr, retrysafe.ErrLeaseLost):
			if !res.Claimed {
				t.Fatalf("round %d: Complete lost its lease but the claim did not win; record %s", round, describe(res.Record))
			}
			checkProcessing(t, rec, claim, 2, at(0))
		default:
			t.Fatalf("round %d: Complete: unexpected error %v", round, completeErr)
		}
	}
}
