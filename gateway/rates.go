package gateway

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrysafe/retrysafe"
)

// rateWindow is how far back the operator page's rates reach: one slot
// per second.
const rateWindow = 10 * 60

// rateRing counts protected requests by outcome per second over the last
// [rateWindow] seconds, for the operator page's chart. Adding is a few
// atomic operations; a slot whose second has passed is cleared by the
// first add of its new second, under a mutex.
type rateRing struct {
	slots [rateWindow]rateSlot
	reset sync.Mutex
}

type rateSlot struct {
	sec    atomic.Int64 // Unix second the counts belong to
	counts [maxRateOutcomes]atomic.Uint32
}

// maxRateOutcomes bounds the outcomes a slot counts (a test checks that
// every outcome fits).
const maxRateOutcomes = 20

// rateOutcomes are the outcomes the ring counts, in the order of
// rateSlot.counts (every outcome the engine reports).
var rateOutcomes = allOutcomes

var rateIndex = func() map[retrysafe.Outcome]int {
	if len(rateOutcomes) > maxRateOutcomes {
		panic("gateway: more outcomes than maxRateOutcomes")
	}
	m := make(map[retrysafe.Outcome]int, len(rateOutcomes))
	for i, o := range rateOutcomes {
		m[o] = i
	}
	return m
}()

// add counts one outcome at now.
func (r *rateRing) add(o retrysafe.Outcome, now time.Time) {
	i, ok := rateIndex[o]
	if !ok {
		return
	}
	sec := now.Unix()
	s := &r.slots[uint64(sec)%rateWindow]
	if s.sec.Load() != sec {
		r.reset.Lock()
		if s.sec.Load() != sec {
			for j := range s.counts {
				s.counts[j].Store(0)
			}
			s.sec.Store(sec)
		}
		r.reset.Unlock()
	}
	s.counts[i].Add(1)
}

// RateBucket is the number of protected requests by outcome in one
// interval of the operator page's chart.
type RateBucket struct {
	Start  time.Time                   `json:"start"`
	Counts map[retrysafe.Outcome]int64 `json:"counts"`
}

// buckets returns the counts of the last n intervals of step seconds that
// ended by now, oldest first (n*step at most rateWindow; the current,
// unfinished second is included in the last bucket).
func (r *rateRing) buckets(now time.Time, step, n int) []RateBucket {
	end := now.Unix() + 1 // exclusive
	start := end - int64(step*n)
	out := make([]RateBucket, n)
	for b := range out {
		out[b] = RateBucket{Start: time.Unix(start+int64(b*step), 0), Counts: make(map[retrysafe.Outcome]int64)}
	}
	for sec := max(start, end-rateWindow); sec < end; sec++ {
		s := &r.slots[uint64(sec)%rateWindow]
		if s.sec.Load() != sec {
			continue
		}
		b := &out[(sec-start)/int64(step)]
		for i, o := range rateOutcomes {
			if c := s.counts[i].Load(); c > 0 {
				b.Counts[o] += int64(c)
			}
		}
	}
	return out
}
