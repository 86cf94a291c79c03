package gateway

import (
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

func TestRateRing(t *testing.T) {
	t.Parallel()
	if len(rateOutcomes) > maxRateOutcomes {
		t.Fatalf("%d outcomes, the ring counts %d", len(rateOutcomes), maxRateOutcomes)
	}
	var r rateRing
	base := time.Unix(1_700_000_000, 0) // a multiple of 10 s
	// Concurrent adds in one second all count.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				r.add(retrysafe.OutcomeNew, base)
			}
		})
	}
	wg.Wait()
	r.add(retrysafe.OutcomeReplayed, base.Add(5*time.Second))
	r.add(retrysafe.OutcomeConflict, base.Add(15*time.Second))
	now := base.Add(19 * time.Second)
	b := r.buckets(now, 10, 3)
	if len(b) != 3 || !b[2].Start.Equal(base.Add(10*time.Second)) {
		t.Fatalf("buckets start %v…, want the last at %v", b[0].Start, base.Add(10*time.Second))
	}
	if b[1].Counts[retrysafe.OutcomeNew] != 8000 || b[1].Counts[retrysafe.OutcomeReplayed] != 1 || b[2].Counts[retrysafe.OutcomeConflict] != 1 || len(b[0].Counts) != 0 {
		t.Errorf("buckets = %+v", b)
	}
	// Ten minutes later the slot of base is reused: its old counts are gone.
	later := base.Add(rateWindow * time.Second)
	r.add(retrysafe.OutcomeMismatch, later)
	b = r.buckets(later, 10, rateWindow/10)
	var total int64
	for _, bk := range b {
		for _, c := range bk.Counts {
			total += c
		}
	}
	if total != 3 { // replayed at +5s and conflict at +15s are still in the window; mismatch now
		t.Errorf("after ten minutes: %d counted, want 3 (the 8000 of the reused second are gone)", total)
	}
}
