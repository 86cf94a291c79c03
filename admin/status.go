package admin

import (
	"time"

	"github.com/retrysafe/retrysafe"
)

// Status is a record's state as operators see it, from [StatusOf]: the
// operator page, `retrysafe keys` and the counts of [Stats] all use it.
type Status string

// The statuses a record can have at a time; every record has exactly one.
const (
	StatusProcessing Status = "processing" // claimed, its owner's lease live
	StatusUnknown    Status = "unknown"    // processing, lease ran out: the outcome is unknown
	// StatusAwaitingRetry: processing, lease ran out, and the completer
	// found the attempt not done ([retrysafe.Record.ResolvedNotDone]):
	// the next retry takes it over and runs the operation.
	StatusAwaitingRetry Status = "awaiting_retry"
	StatusCompleted     Status = "completed" // a stored result, replayed until ExpiresAt
	StatusFailed        Status = "failed"    // completed with a stored status of 400 or more
	StatusExpired       Status = "expired"   // completed, past ExpiresAt (absent), not swept yet
)

// StatusOf returns rec's status at now. An expired record is expired
// whatever its stored status; a failed one replays like any result.
func StatusOf(rec *retrysafe.Record, now time.Time) Status {
	switch {
	case rec.LeaseExpired(now), rec.State == retrysafe.StateProcessing && rec.Abandoned:
		if rec.ResolvedNotDone() {
			return StatusAwaitingRetry
		}
		return StatusUnknown
	case rec.State == retrysafe.StateProcessing:
		return StatusProcessing
	case rec.Expired(now):
		return StatusExpired
	case rec.Response != nil && rec.Response.Status >= 400:
		return StatusFailed
	}
	return StatusCompleted
}
