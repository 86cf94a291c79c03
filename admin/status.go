package admin

import (
	"strconv"
	"strings"
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
	// StatusAwaitingRetry: processing, lease ran out, and a resolver
	// found the attempt not done ([ResolvedNotDone]): the next retry
	// takes it over and runs the operation.
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
		if ResolvedNotDone(rec) {
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

// notDonePrefix starts the name of the checkpoint that records that a
// resolver found an attempt not done: "gateway-not-done attempt=N",
// optionally followed by a space and more (the gateway adds the cause
// the attempt recorded). Checkpoint names starting with "gateway-" are
// the gateway's own notes; the gateway's upstream cannot write
// checkpoints.
const notDonePrefix = "gateway-not-done attempt="

// NotDoneCheckpointName returns the name of the checkpoint that records
// that attempt was resolved not done (see [ResolvedNotDone]); suffix,
// when not "", follows it after a space.
func NotDoneCheckpointName(attempt int, suffix string) string {
	name := notDonePrefix + strconv.Itoa(attempt)
	if suffix != "" {
		name += " " + suffix
	}
	return name
}

// NotDoneCheckpoint reads a checkpoint named by [NotDoneCheckpointName]:
// the attempt it was resolved not done at and the suffix, ok false for
// any other checkpoint.
func NotDoneCheckpoint(cp *retrysafe.Checkpoint) (attempt int, suffix string, ok bool) {
	if cp == nil {
		return 0, "", false
	}
	rest, found := strings.CutPrefix(cp.Name, notDonePrefix)
	if !found {
		return 0, "", false
	}
	n, suffix, _ := strings.Cut(rest, " ")
	attempt, err := strconv.Atoi(n)
	if err != nil || attempt < 1 || strconv.Itoa(attempt) != n {
		return 0, "", false
	}
	return attempt, suffix, true
}

// ResolvedNotDone reports whether rec's current attempt was resolved not
// done: its checkpoint, named by [NotDoneCheckpointName], is for
// rec.Attempt. The gateway's completer records that (fenced by the
// record's token) when the resolve URL answers not_done, instead of
// releasing the record, so that the next retry takes the record over as
// the next attempt, which the upstream's fence admits. A takeover keeps
// the checkpoint but raises Attempt, so the mark no longer applies.
func ResolvedNotDone(rec *retrysafe.Record) bool {
	attempt, _, ok := NotDoneCheckpoint(rec.Checkpoint)
	return ok && rec.State == retrysafe.StateProcessing && attempt == rec.Attempt
}
