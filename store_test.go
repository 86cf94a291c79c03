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
