package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// Overlap scenarios: many callers of one store at once, more than a store
// that groups concurrent operations into batches puts in one batch (the
// PostgreSQL and SQLite stores group up to 64), so operations of one key
// and of many keys meet in one batch and cross batch boundaries.

// overlapCallers is the number of goroutines of the overlap scenarios.
const overlapCallers = 200

func overlapScenarios() []scenario {
	return []scenario{
		{"OverlapOneKey", testOverlapOneKey},
		{"OverlapDistinctKeys", testOverlapDistinctKeys},
	}
}

// together runs body(i) for i in [0, n) on n goroutines released at once,
// and waits for all.
func together(n int, body func(i int)) {
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range n {
		ready.Add(1)
		done.Go(func() {
			ready.Done()
			<-start
			body(i)
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
}

// testOverlapOneKey: 200 concurrent claims of one absent key: exactly one
// wins and every other sees its record. Then 200 concurrent claims of the
// key race the owner's Complete: each sees either the owner's processing
// record (no response) or the whole completed record, and none wins. Five
// rounds, each on a fresh key.
func testOverlapOneKey(t *testing.T, h *harness) {
	want := sampleResponse()
	for round := range 5 {
		key := fmt.Sprintf("overlap-one-%d", round)
		params, results := claimRace(t, h, []retrysafe.Store{h.s}, overlapCallers, scope1, key, fpA, at(0))
		owner := params[oneWinner(t, round, params, results)]

		now := at(time.Second)
		var completeErr error
		errs := make([]error, overlapCallers)
		seen := make([]*retrysafe.ClaimResult, overlapCallers)
		together(overlapCallers+1, func(i int) {
			if i == overlapCallers {
				completeErr = h.s.Complete(h.ctx, &retrysafe.CompleteParams{Scope: scope1, Key: key, Token: owner.Token, Now: now, TTL: ttl, Response: want})
				return
			}
			seen[i], errs[i] = h.s.Claim(h.ctx, claimParams(scope1, key, fpA, now))
		})
		if completeErr != nil {
			t.Fatalf("round %d: Complete by the owner amid %d claims: %v", round, overlapCallers, completeErr)
		}
		for i, res := range seen {
			if errs[i] != nil {
				t.Fatalf("round %d: claim %d racing the completion: %v", round, i, errs[i])
			}
			rec := res.Record
			if res.Claimed || rec == nil || rec.Token != owner.Token {
				t.Fatalf("round %d: claim %d racing the completion: claimed=%v, record %s; want the owner's record", round, i, res.Claimed, describe(rec))
			}
			switch rec.State {
			case retrysafe.StateProcessing:
				if rec.Response != nil {
					t.Fatalf("round %d: claim %d saw a processing record with a response", round, i)
				}
			case retrysafe.StateCompleted:
				checkResponse(t, fmt.Sprintf("round %d: claim %d after the completion", round, i), rec.Response, want)
				checkTime(t, "ExpiresAt", rec.ExpiresAt, now.Add(ttl))
			default:
				t.Fatalf("round %d: claim %d saw state %q", round, i, rec.State)
			}
		}
	}
}

// testOverlapDistinctKeys: 200 goroutines at once, each on a key of its
// own, claim, extend, then complete (even goroutines) or release (odd
// ones), then claim again, while a stranger's token is fenced on every
// key: every call gets its own key's answer.
func testOverlapDistinctKeys(t *testing.T, h *harness) {
	want := sampleResponse()
	errs := make([]error, overlapCallers)
	together(overlapCallers, func(i int) {
		errs[i] = func() error {
			key := fmt.Sprintf("overlap-distinct-%03d", i)
			p := claimParams(scope1, key, fpA, at(0))
			res, err := h.s.Claim(h.ctx, p)
			if err != nil {
				return fmt.Errorf("Claim: %w", err)
			}
			if !res.Claimed || res.Record.Key != key || res.Record.Token != p.Token || res.Record.Attempt != 1 {
				return fmt.Errorf("Claim of a fresh key: claimed=%v, record %s", res.Claimed, describe(res.Record))
			}
			if err := h.s.Extend(h.ctx, &retrysafe.ExtendParams{Scope: scope1, Key: key, Token: p.Token, Now: at(time.Second), Lease: 2 * lease}); err != nil {
				return fmt.Errorf("Extend by the owner: %w", err)
			}
			stranger := retrysafe.NewToken()
			if err := h.s.Complete(h.ctx, &retrysafe.CompleteParams{Scope: scope1, Key: key, Token: stranger, Now: at(time.Second), TTL: ttl, Response: want}); !errors.Is(err, retrysafe.ErrLeaseLost) {
				return fmt.Errorf("Complete with a stranger's token: %v, want ErrLeaseLost", err)
			}
			// The extended lease holds at the old lease's end.
			if res, err := h.s.Claim(h.ctx, claimParams(scope1, key, fpA, at(lease))); err != nil || res.Claimed {
				return fmt.Errorf("Claim within the extended lease: %+v, %v; want blocked", res, err)
			}
			if i%2 == 0 {
				if err := h.s.Complete(h.ctx, &retrysafe.CompleteParams{Scope: scope1, Key: key, Token: p.Token, Now: at(lease), TTL: ttl, Response: want}); err != nil {
					return fmt.Errorf("Complete by the owner: %w", err)
				}
				res, err := h.s.Claim(h.ctx, claimParams(scope1, key, fpA, at(lease+time.Second)))
				if err != nil || res.Claimed || res.Record.State != retrysafe.StateCompleted || res.Record.Response == nil ||
					res.Record.Response.Status != want.Status || string(res.Record.Response.Body) != string(want.Body) {
					return fmt.Errorf("Claim after completion: %+v, %v; want the completed record", res, err)
				}
				return nil
			}
			if err := h.s.Release(h.ctx, &retrysafe.ReleaseParams{Scope: scope1, Key: key, Token: p.Token}); err != nil {
				return fmt.Errorf("Release by the owner: %w", err)
			}
			again := claimParams(scope1, key, fpA, at(lease))
			res, err = h.s.Claim(h.ctx, again)
			if err != nil || !res.Claimed || res.Record.Token != again.Token || res.Record.Attempt != 1 {
				return fmt.Errorf("Claim after release: %+v, %v; want a new claim, attempt 1", res, err)
			}
			return nil
		}()
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("goroutine %d: %v", i, err)
		}
	}
}
