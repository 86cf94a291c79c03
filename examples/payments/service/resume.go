package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/examples/payments/provider"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
)

// The checkpoints of POST /payments, the recovery points of its phases. A
// later attempt of the operation (a takeover after a crash) reads the last
// one with Operation.Resumed and goes on from there; the Resolver reads it
// as Record.Checkpoint.
const (
	// CheckpointPaymentRecorded: phase 1 committed. The pending payment
	// and the provider key exist; the charge may or may not have been
	// requested. Written with the store's CheckpointTx in phase 1's
	// transaction, so it exists exactly when the payment does.
	CheckpointPaymentRecorded = "payment-recorded"
	// CheckpointChargeAnswered: the provider answered the charge
	// definitely (charged or declined); the business write and the
	// completion (phase 3) are still to come.
	CheckpointChargeAnswered = "charge-answered"
)

// Kill points of POST /payments, for Config.Crash: between the charge and
// the completion, where a crash leaves an outcome that only the provider
// knows.
const (
	// CrashAfterCharge: the provider answered; nothing of the answer is
	// recorded yet.
	CrashAfterCharge = "after-charge"
	// CrashAfterCheckpoint: the answer is checkpointed; the payment's
	// outcome and the idempotency record's completion are not written.
	CrashAfterCheckpoint = "after-checkpoint"
)

// paymentCheckpoint is a checkpoint's data: which payment the operation
// made, the key its charge goes to the provider with, and (after the
// answer) the charge.
type paymentCheckpoint struct {
	PaymentID    string `json:"paymentId"`
	ProviderKey  string `json:"providerKey"`
	ChargeID     string `json:"chargeId,omitempty"`
	ChargeStatus string `json:"chargeStatus,omitempty"`
}

func (cp *paymentCheckpoint) encode() []byte {
	b, _ := json.Marshal(cp) // strings only: cannot fail
	return b
}

func decodeCheckpoint(name string, data []byte) (*paymentCheckpoint, error) {
	var cp paymentCheckpoint
	if err := json.Unmarshal(data, &cp); err != nil || cp.PaymentID == "" || cp.ProviderKey == "" {
		return nil, fmt.Errorf("service: checkpoint %q is not a payment checkpoint: %q", name, data)
	}
	return &cp, nil
}

// checkpointParams returns the parameters that record the checkpoint
// name, cp of op's record with a store's CheckpointTx: fenced by op's owner
// token (which the Operation hands out only in CompleteParams), renewing
// the lease as the middleware's heartbeat does.
func (s *Service) checkpointParams(op *retrysafe.Operation, name string, cp *paymentCheckpoint) *retrysafe.ExtendParams {
	c := op.CompleteParams(nil)
	return &retrysafe.ExtendParams{
		Scope: c.Scope, Key: c.Key, Token: c.Token, Now: c.Now, Lease: s.cfg.Lease,
		Checkpoint: &retrysafe.Checkpoint{Name: name, Data: cp.encode()},
	}
}

// resumedPayment returns the payment an earlier attempt of op recorded,
// when op took over an attempt that got past phase 1 (its checkpoint says
// so), or nil: the first attempt, or a takeover of one that died before
// phase 1 committed, which starts from the beginning.
func (s *Service) resumedPayment(ctx context.Context, op *retrysafe.Operation) (*repo.Payment, error) {
	name, data, ok := op.Resumed()
	if !ok {
		return nil, nil
	}
	cp, err := decodeCheckpoint(name, data)
	if err != nil {
		return nil, err
	}
	p, err := s.db.Read().Payment(ctx, cp.PaymentID)
	if err != nil {
		return nil, fmt.Errorf("service: resuming payment %s: %w", cp.PaymentID, err)
	}
	s.log.InfoContext(ctx, "payments: resuming from checkpoint", "checkpoint", name, "attempt", op.Attempt(),
		"payment", p.ID, "status", p.Status)
	return p, nil
}

// crash calls Config.Crash at a kill point.
func (s *Service) crash(point string, op *retrysafe.Operation) {
	if s.cfg.Crash != nil {
		s.cfg.Crash(point, op)
	}
}

// resolve is the service's [retrysafe.Resolver] (Config.ResolveWithProvider):
// before a retry takes over an attempt whose outcome is unknown (its
// process died, its lease ran out), it asks the provider whether the
// charge with the payment's key happened, instead of guessing.
//
//   - No checkpoint: phase 1 never committed (the checkpoint commits with
//     it), so nothing was charged: re-run. The same holds for POST /orders
//     and refunds, whose writes commit with their completion: a record of
//     theirs left processing wrote nothing.
//   - The payment is already settled (by reconciliation, or by an earlier
//     decision whose completion was lost): complete with its answer.
//   - The provider holds a charge with the key (charged or declined):
//     settle the payment from it and complete with the answer phase 3
//     would have given. The business write commits first; if storing the
//     answer then fails, the next decision finds the payment settled and
//     gives the same answer.
//   - The provider holds none: re-run. The attempt that takes over
//     resumes from the checkpoint and charges with the same key, so even
//     a charge request still on its way cannot be made twice.
//   - The provider cannot tell (unreachable, or a request with the key is
//     still being handled): an error, so the record stays blocked and the
//     next retry asks again.
func (s *Service) resolve(ctx context.Context, rec *retrysafe.Record) (retrysafe.Resolution, error) {
	if rec.Checkpoint == nil {
		s.log.InfoContext(ctx, "payments: resolver decided", "decision", "rerun", "why", "no checkpoint")
		return retrysafe.Resolution{Action: retrysafe.ResolveRerun}, nil
	}
	cp, err := decodeCheckpoint(rec.Checkpoint.Name, rec.Checkpoint.Data)
	if err != nil {
		return retrysafe.Resolution{}, err
	}
	p, err := s.db.Read().Payment(ctx, cp.PaymentID)
	if err != nil {
		return retrysafe.Resolution{}, err
	}
	why := "payment already " + p.Status
	if p.Status == repo.PaymentPending || p.Status == repo.PaymentUnknown {
		ch, err := s.provider.Lookup(ctx, p.ProviderKey)
		switch {
		case errors.Is(err, provider.ErrNoCharge):
			s.log.InfoContext(ctx, "payments: resolver decided", "decision", "rerun", "why", "the provider holds no charge", "payment", p.ID)
			return retrysafe.Resolution{Action: retrysafe.ResolveRerun}, nil
		case err != nil:
			return retrysafe.Resolution{}, fmt.Errorf("service: resolver: provider lookup: %w", err)
		}
		err = s.db.InTx(ctx, func(tx *repo.Tx) error {
			if err := s.applyOutcome(ctx, tx, p.ID, &chargeOutcome{charge: ch}); err != nil {
				return err
			}
			p, err = tx.Payment(ctx, p.ID)
			return err
		})
		if err != nil {
			return retrysafe.Resolution{}, err
		}
		why = "the provider holds charge " + ch.ID + " (" + ch.Status + ")"
	}
	s.log.InfoContext(ctx, "payments: resolver decided", "decision", "complete", "why", why, "payment", p.ID)
	return retrysafe.Resolution{Action: retrysafe.ResolveComplete, Response: paymentResponse(p)}, nil
}

// CompleteStranded is the completer: it lists the records whose attempt's
// outcome is unknown (processing, lease run out, or abandoned), up to
// limit, and lets the Resolver decide about each with no retry waiting,
// each decision written fenced by the record's token (a record that a
// retry took over or completed meanwhile is left alone). It needs
// Config.ResolveWithProvider, and a store that lists records (SQLite and
// PostgreSQL do).
func (s *Service) CompleteStranded(ctx context.Context, limit int) (retrysafe.Stranded, error) {
	if s.completer == nil {
		return retrysafe.Stranded{}, errors.New("service: CompleteStranded needs Config.ResolveWithProvider")
	}
	adm, ok := retrysafe.As[admin.Admin](s.db.Store())
	if !ok {
		return retrysafe.Stranded{}, errors.New("service: the store cannot list records")
	}
	recs, err := adm.List(ctx, &admin.ListParams{LeaseExpiredBy: s.cfg.Now(), Limit: limit})
	if err != nil {
		return retrysafe.Stranded{}, err
	}
	return s.completer.ResolveStranded(ctx, recs)
}
