package admin_test

import (
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// TestStatsOfCountsStatuses: StatsOf's counts are those of
// admin.StatusOf: an expired record that failed counts as
// expired, not failed.
func TestStatsOfCountsStatuses(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	recs := []*retrysafe.Record{
		{Key: "live", State: retrysafe.StateProcessing, LeaseUntil: now.Add(time.Minute)},
		{Key: "stuck", State: retrysafe.StateProcessing, LeaseUntil: now.Add(-time.Minute)},
		{Key: "ok", State: retrysafe.StateCompleted, ExpiresAt: now.Add(time.Hour), Response: &retrysafe.Response{Status: 201}},
		{Key: "fail", State: retrysafe.StateCompleted, ExpiresAt: now.Add(time.Hour), Response: &retrysafe.Response{Status: 500}},
		{Key: "old-fail", State: retrysafe.StateCompleted, ExpiresAt: now.Add(-time.Hour), Response: &retrysafe.Response{Status: 500}},
	}
	st := admin.StatsOf(recs, &admin.StatsParams{Now: now})
	got := [5]int64{st.Processing, st.Completed, st.LeaseExpired, st.Failed, st.Expired}
	if want := [5]int64{2, 3, 1, 1, 1}; got != want {
		t.Errorf("StatsOf counts (processing, completed, lease expired, failed, expired) = %v, want %v", got, want)
	}
	if st.OldestInFlight == nil || st.OldestInFlight.Key != "live" || len(st.Unknown) != 1 || st.Unknown[0].Key != "stuck" {
		t.Errorf("StatsOf: oldest %+v, unknown %+v; want live and [stuck]", st.OldestInFlight, st.Unknown)
	}
}
