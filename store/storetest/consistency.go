package storetest

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

func consistencyScenarios() []scenario {
	return []scenario{
		{"ConsistentReads", testConsistentReads},
	}
}

// testConsistentReads: readers racing a Complete never see a half-written
// record. Every Get and every duplicate Claim sees either the processing
// record (no response) or the completed record with its whole response
// and ExpiresAt — never a completed state without the response, a partial
// body or a partial set of headers.
func testConsistentReads(t *testing.T, h *harness) {
	const rounds, readers = 20, 8
	header := http.Header{}
	for i := range 20 {
		header[fmt.Sprintf("X-H%02d", i)] = []string{strings.Repeat("v", i), fmt.Sprint(i)}
	}
	want := &retrysafe.Response{Status: http.StatusAccepted, Header: header, Body: []byte(strings.Repeat("0123456789abcdef", 4096))}

	for round := range rounds {
		key := fmt.Sprintf("consistent-%03d", round)
		owner, _ := h.claimNew(scope1, key, fpA, at(0))
		now := at(time.Second)

		start := make(chan struct{})
		done := make(chan struct{})
		var wg sync.WaitGroup
		var (
			mu   sync.Mutex
			seen []*retrysafe.Record
			errs []error
		)
		record := func(rec *retrysafe.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			seen = append(seen, rec)
		}
		for r := range readers {
			wg.Go(func() {
				<-start
				for completed := false; !completed; {
					select {
					case <-done:
						completed = true // one more read after Complete returned
					default:
					}
					var rec *retrysafe.Record
					var err error
					if r%2 == 0 {
						rec, err = h.s.Get(h.ctx, &retrysafe.GetParams{Scope: scope1, Key: key, Now: now})
					} else {
						var res *retrysafe.ClaimResult
						res, err = h.s.Claim(h.ctx, claimParams(scope1, key, fpA, now))
						if err == nil {
							if res.Claimed {
								err = fmt.Errorf("a duplicate claim within the lease won")
							}
							rec = res.Record
						}
					}
					record(rec, err)
				}
			})
		}
		var completeErr error
		wg.Go(func() {
			<-start
			completeErr = h.complete(scope1, key, owner.Token, now, want)
			close(done)
		})
		close(start)
		wg.Wait()

		if completeErr != nil {
			t.Fatalf("round %d: Complete: %v", round, completeErr)
		}
		if len(errs) > 0 {
			t.Fatalf("round %d: %d reads failed racing a Complete; first: %v", round, len(errs), errs[0])
		}
		for _, rec := range seen {
			switch rec.State {
			case retrysafe.StateProcessing:
				if rec.Response != nil || rec.Token != owner.Token {
					t.Fatalf("round %d: a read racing Complete saw a processing record %s", round, describe(rec))
				}
			case retrysafe.StateCompleted:
				if rec.Token != owner.Token || !rec.ExpiresAt.Equal(now.Add(ttl)) {
					t.Fatalf("round %d: a read racing Complete saw a completed record %s", round, describe(rec))
				}
				checkResponse(t, fmt.Sprintf("round %d: response read racing Complete", round), rec.Response, want)
				if t.Failed() {
					return
				}
			default:
				t.Fatalf("round %d: a read racing Complete saw state %q", round, rec.State)
			}
		}
	}
}
