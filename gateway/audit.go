package gateway

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// AuditPrefix starts the message of every line [LogAudit] writes, and
// each has the attribute audit=true: a log pipeline finds the operators'
// destructive actions by either.
const AuditPrefix = "audit: "

// Audit describes one destructive operator action (deleting a record,
// say), from the operator page or the CLI, for [LogAudit].
type Audit struct {
	// Actor is who acted: the admin token's name on the operator page,
	// the OS user for the CLI; "" logs as "unknown".
	Actor string
	// Via is where: "operator page" or "cli".
	Via string
	// Action is what was done, as the line's message says it after
	// [AuditPrefix]: "record deleted", for one.
	Action string
	// Scope and Key name the record. The key is logged as a digest
	// (key_sha256, as the operator page's other lines), never as it is.
	Scope, Key string
	// Before is the record as it was before the action; nil when it was
	// absent (or could not be read).
	Before *retrysafe.Record
	// Remote is the peer's address on the operator page; "" for the CLI.
	Remote string
	// Attrs are the action's own attributes (key-value pairs, as
	// slog takes them), logged after the record's: a resolve adds
	// action, abandoned, and for a completed answer status and
	// body_bytes.
	Attrs []any
}

// LogAudit writes one line at info level (warn when err is not nil) for a
// destructive operator action: who, via what, what, the record (scope and
// a digest of its key) and its state before (state_before, attempt, and
// for a completed record its status), the action's own Attrs, and the
// result: "done", "absent" (err matches retrysafe.ErrNotFound),
// "refused" (err matches retrysafe.ErrLeaseLost: the record changed since
// it was read, and nothing was written) or "failed" with the error. The
// operator page and "retrysafe keys" both log through it, so every such
// line has the same attributes.
func LogAudit(ctx context.Context, logger *slog.Logger, now time.Time, a Audit, err error) {
	actor := a.Actor
	if actor == "" {
		actor = "unknown"
	}
	attrs := []any{"audit", true, "actor", actor, "via", a.Via,
		"scope", a.Scope, "key_sha256", keyDigest(a.Key)}
	if a.Remote != "" {
		attrs = append(attrs, "remote", a.Remote)
	}
	if b := a.Before; b != nil {
		attrs = append(attrs, "state_before", string(admin.StatusOf(b, now)), "attempt", b.Attempt)
		if b.Route != "" {
			attrs = append(attrs, "route", b.Route)
		}
		if b.State == retrysafe.StateCompleted && b.Response != nil {
			attrs = append(attrs, "status_before", b.Response.Status)
		}
	} else {
		attrs = append(attrs, "state_before", "absent")
	}
	attrs = append(attrs, a.Attrs...)
	level := slog.LevelInfo
	switch {
	case err == nil:
		attrs = append(attrs, "result", "done")
	case errors.Is(err, retrysafe.ErrNotFound):
		attrs = append(attrs, "result", "absent")
	case errors.Is(err, retrysafe.ErrLeaseLost):
		// A fenced write (a resolve) found the record changed since it
		// was read: nothing was written.
		level = slog.LevelWarn
		attrs = append(attrs, "result", "refused", "err", err)
	default:
		level = slog.LevelWarn
		attrs = append(attrs, "result", "failed", "err", err)
	}
	logger.Log(ctx, level, AuditPrefix+a.Action, attrs...)
}
