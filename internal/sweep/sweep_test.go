package sweep

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/admin"
)

func TestNew(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 4, 5, 6, 7, 8, time.UTC)
	for name, tc := range map[string]struct {
		p    *admin.SweepParams
		want Plan
		err  string
	}{
		"defaults": {&admin.SweepParams{Now: now}, Plan{now.UnixNano(), now.Add(-admin.DefaultProcessingRetention).UnixNano(), 1000}, ""},
		"given":    {&admin.SweepParams{Now: now, ProcessingRetention: time.Hour, BatchSize: 7}, Plan{now.UnixNano(), now.Add(-time.Hour).UnixNano(), 7}, ""},
		"clamped":  {&admin.SweepParams{Now: time.Unix(0, -1<<63).Add(time.Hour), ProcessingRetention: 48 * time.Hour}, Plan{time.Unix(0, -1<<63).Add(time.Hour).UnixNano(), -1 << 63, 1000}, ""},
		"nil":      {nil, Plan{}, "nil params"},
		"zero now": {&admin.SweepParams{}, Plan{}, "params.Now 0001-01-01T00:00:00Z out of the storable range"},
		"too late": {&admin.SweepParams{Now: time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC)}, Plan{}, "out of the storable range"},
		"negative": {&admin.SweepParams{Now: now, ProcessingRetention: -time.Second}, Plan{}, "negative"},
	} {
		got, err := New(tc.p, 1000)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("%s: New = %+v, %v; want %+v", name, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: New = %+v, %v; want an error containing %q", name, got, err, tc.err)
		}
	}
}

// TestRun: each kind runs until a batch comes up short (a full last batch
// costs one more, empty, call), expired first, and the first error stops
// the sweep with the count so far.
func TestRun(t *testing.T) {
	t.Parallel()
	pl := Plan{Expired: 10, Abandoned: 5, Batch: 2}
	left := map[bool]int{false: 4, true: 3} // records of each kind
	var calls []string
	n, err := pl.Run(func(retire bool, bound int64) (int, error) {
		if want := map[bool]int64{false: 10, true: 5}[retire]; bound != want {
			t.Errorf("del(%v, %d): want bound %d", retire, bound, want)
		}
		d := min(left[retire], pl.Batch)
		left[retire] -= d
		calls = append(calls, map[bool]string{false: "e", true: "r"}[retire]+string(rune('0'+d)))
		return d, nil
	})
	if n != 7 || err != nil || strings.Join(calls, ",") != "e2,e2,e0,r2,r1" {
		t.Fatalf("Run = %d, %v after %v; want 7, nil after e2,e2,e0,r2,r1", n, err, calls)
	}
	boom := errors.New("boom")
	n, err = pl.Run(func(retire bool, bound int64) (int, error) {
		if retire {
			t.Error("Run went on to retire after an error")
		}
		return 1, boom
	})
	if n != 1 || !errors.Is(err, boom) {
		t.Fatalf("Run with a failing batch = %d, %v; want 1, boom", n, err)
	}
}
