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
