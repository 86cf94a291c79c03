package retrysafe

import (
	"testing"
	"time"
)

func TestProcessingRecord(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 7, time.UTC)
	p := &ClaimParams{Scope: "s", Key: "k", Fingerprint: "fp", Token: "tok", Now: now, Lease: time.Minute}
	created := now.Add(-time.Hour)
	rec := p.ProcessingRecord(3, created, now, now.Add(p.Lease))
	want := Record{
		Scope: "s", Key: "k", Fingerprint: "fp", State: StateProcessing, Token: "tok", Attempt: 3,
		CreatedAt: created, UpdatedAt: now, LeaseUntil: now.Add(time.Minute),
	}
	if *rec != want {
		t.Fatalf("ProcessingRecord = %+v, want %+v", *rec, want)
	}
}

func TestRecordStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	completed := func(status int, expires time.Duration) Record {
		return Record{State: StateCompleted, ExpiresAt: now.Add(expires), Response: &Response{Status: status}}
	}
	for name, tc := range map[string]struct {
		rec  Record
		want Status
	}{
		"processing":          {Record{State: StateProcessing, LeaseUntil: now.Add(time.Nanosecond)}, StatusProcessing},
		"lease ends now":      {Record{State: StateProcessing, LeaseUntil: now}, StatusUnknown},
		"lease ran out":       {Record{State: StateProcessing, LeaseUntil: now.Add(-time.Hour)}, StatusUnknown},
		"completed 201":       {completed(201, time.Hour), StatusCompleted},
		"completed 399":       {completed(399, time.Hour), StatusCompleted},
		"failed 400":          {completed(400, time.Hour), StatusFailed},
		"failed 503":          {completed(503, time.Hour), StatusFailed},
		"expires now":         {completed(201, 0), StatusExpired},
		"expired and failed":  {completed(500, -time.Hour), StatusExpired},
		"completed, no reply": {Record{State: StateCompleted, ExpiresAt: now.Add(time.Hour)}, StatusCompleted},
	} {
		if got := tc.rec.Status(now); got != tc.want {
			t.Errorf("%s: Status = %q, want %q", name, got, tc.want)
		}
	}
}

// TestStatsOfCountsStatuses: StatsOf's counts are those of Record.Status:
// an expired record that failed counts as expired, not failed.
func TestStatsOfCountsStatuses(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	recs := []*Record{
		{Key: "live", State: StateProcessing, LeaseUntil: now.Add(time.Minute)},
		{Key: "stuck", State: StateProcessing, LeaseUntil: now.Add(-time.Minute)},
		{Key: "ok", State: StateCompleted, ExpiresAt: now.Add(time.Hour), Response: &Response{Status: 201}},
		{Key: "fail", State: StateCompleted, ExpiresAt: now.Add(time.Hour), Response: &Response{Status: 500}},
		{Key: "old-fail", State: StateCompleted, ExpiresAt: now.Add(-time.Hour), Response: &Response{Status: 500}},
	}
	st := StatsOf(recs, &StatsParams{Now: now})
	got := [5]int64{st.Processing, st.Completed, st.LeaseExpired, st.Failed, st.Expired}
	if want := [5]int64{2, 3, 1, 1, 1}; got != want {
		t.Errorf("StatsOf counts (processing, completed, lease expired, failed, expired) = %v, want %v", got, want)
	}
	if st.OldestInFlight == nil || st.OldestInFlight.Key != "live" || len(st.Unknown) != 1 || st.Unknown[0].Key != "stuck" {
		t.Errorf("StatsOf: oldest %+v, unknown %+v; want live and [stuck]", st.OldestInFlight, st.Unknown)
	}
}
