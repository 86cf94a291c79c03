// Package retrysafetest helps test code that runs behind retrysafe: it
// gives a context carrying the [retrysafe.Operation] that the middleware
// and [retrysafe.Do] give a handler, for a record of the test's choosing,
// without a store.
package retrysafetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/retrysafe/retrysafe"
)

// OperationContext returns a context carrying an Operation for rec, as a
// handler whose request claimed rec finds it, and that Operation. The
// context has ctx's values but, like a handler's, is never cancelled. ttl
// is the TTL the Operation's CompleteParams carry (zero means
// retrysafe.DefaultTTL); now is its clock (nil means time.Now).
//
// rec's fields are taken as they are, so a test may use any scope and key,
// even ones the middleware would reject. The error is that of an invalid
// ttl. The Operation is real: it is made by running [retrysafe.Run]
// against a store whose claims win with rec and whose writes change
// nothing.
func OperationContext(ctx context.Context, rec *retrysafe.Record, ttl time.Duration, now func() time.Time) (context.Context, *retrysafe.Operation, error) {
	d, err := retrysafe.NewDoer(retrysafe.DoConfig{
		Store: oneRecord{rec}, Scope: rec.Scope, TTL: ttl, Now: now,
		Lease:  time.Hour, // no renewal while the operation is made
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("retrysafetest: %w", err)
	}
	var (
		opCtx context.Context
		op    *retrysafe.Operation
	)
	// The operation describes the record the claim returns (rec), not the
	// key given to Run.
	_, err = retrysafe.Run(ctx, d, "retrysafetest", rec.Fingerprint, func(fctx context.Context) (struct{}, error) {
		opCtx, op = context.WithoutCancel(fctx), retrysafe.OperationFromContext(fctx)
		return struct{}{}, nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("retrysafetest: %w", err)
	}
	return opCtx, op, nil
}

// oneRecord is a Store whose every claim wins with (a copy of) rec and
// whose writes change nothing.
type oneRecord struct{ rec *retrysafe.Record }

func (s oneRecord) Claim(context.Context, *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	r := *s.rec
	r.State = retrysafe.StateProcessing
	return &retrysafe.ClaimResult{Claimed: true, Record: &r}, nil
}

func (oneRecord) Get(context.Context, *retrysafe.GetParams) (*retrysafe.Record, error) {
	return nil, retrysafe.ErrNotFound
}

func (oneRecord) Extend(context.Context, *retrysafe.ExtendParams) error { return nil }

func (oneRecord) Complete(context.Context, *retrysafe.CompleteParams) error { return nil }

func (oneRecord) Release(context.Context, *retrysafe.ReleaseParams) error { return nil }
