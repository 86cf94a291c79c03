package admin_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

func TestStatusOf(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	completed := func(status int, expires time.Duration) retrysafe.Record {
		return retrysafe.Record{State: retrysafe.StateCompleted, ExpiresAt: now.Add(expires), Response: &retrysafe.Response{Status: status}}
	}
	notDone := func(attempt, marked int, leaseUntil time.Time, abandoned ...bool) retrysafe.Record {
		return retrysafe.Record{State: retrysafe.StateProcessing, Attempt: attempt, LeaseUntil: leaseUntil, Abandoned: len(abandoned) > 0,
			Checkpoint: &retrysafe.Checkpoint{Name: "retrysafe-not-done attempt=" + strconv.Itoa(marked)}}
	}
	for name, tc := range map[string]struct {
		rec  retrysafe.Record
		want admin.Status
	}{
		"processing":           {retrysafe.Record{State: retrysafe.StateProcessing, LeaseUntil: now.Add(time.Nanosecond)}, admin.StatusProcessing},
		"lease ends now":       {retrysafe.Record{State: retrysafe.StateProcessing, LeaseUntil: now}, admin.StatusUnknown},
		"lease ran out":        {retrysafe.Record{State: retrysafe.StateProcessing, LeaseUntil: now.Add(-time.Hour)}, admin.StatusUnknown},
		"resolved not done":    {notDone(3, 3, now.Add(-time.Hour)), admin.StatusAwaitingRetry},
		"not done, abandoned":  {notDone(3, 3, now.Add(time.Hour), true), admin.StatusAwaitingRetry},
		"not done earlier":     {notDone(3, 2, now.Add(-time.Hour)), admin.StatusUnknown},
		"not done, taken over": {notDone(3, 2, now.Add(time.Hour)), admin.StatusProcessing},
		"completed 201":        {completed(201, time.Hour), admin.StatusCompleted},
		"completed 399":        {completed(399, time.Hour), admin.StatusCompleted},
		"failed 400":           {completed(400, time.Hour), admin.StatusFailed},
		"failed 503":           {completed(503, time.Hour), admin.StatusFailed},
		"expires now":          {completed(201, 0), admin.StatusExpired},
		"expired and failed":   {completed(500, -time.Hour), admin.StatusExpired},
		"completed, no reply":  {retrysafe.Record{State: retrysafe.StateCompleted, ExpiresAt: now.Add(time.Hour)}, admin.StatusCompleted},
	} {
		if got := admin.StatusOf(&tc.rec, now); got != tc.want {
			t.Errorf("%s: StatusOf = %q, want %q", name, got, tc.want)
		}
	}
}
