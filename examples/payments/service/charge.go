package service

import (
	"context"
	"errors"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/client"
	"github.com/retrysafe/retrysafe/examples/payments/provider"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
)

// chargeOutcome is what the provider said: a charge (succeeded or
// declined), or an error when the outcome is unknown.
type chargeOutcome struct {
	charge *provider.Charge
	err    error
}

// charge asks the provider to charge pay, in the background, and delivers
// the outcome on the returned channel. The key is the payment's provider
// key — derived from the operation with client.DeriveKey and recorded in
// phase 1 — so every attempt, and every attempt that resumes the operation
// after a crash, sends the same key and the provider charges at most once.
// client.Transport retries dropped connections, timeouts and 502/503/504
// with that key. A definite answer is checkpointed ("charge-answered")
// before it is delivered, so the attempt that resumes after a crash knows
// the provider answered.
func (s *Service) charge(ctx context.Context, op *retrysafe.Operation, pay *repo.Payment) <-chan chargeOutcome {
	out := make(chan chargeOutcome, 1)
	opCtx := context.WithoutCancel(ctx) // the checkpoint outlives a 202 answer
	go func() {
		ctx, cancel := context.WithTimeout(s.stop, s.cfg.ProviderTimeout)
		defer cancel()
		c, err := s.provider.Charge(client.WithKey(ctx, pay.ProviderKey), provider.ChargeRequest{
			Amount: pay.Amount, Currency: pay.Currency, Reference: pay.ID,
		})
		s.crash(CrashAfterCharge, op)
		if err == nil {
			cctx, cancel := context.WithTimeout(opCtx, 5*time.Second)
			cerr := op.Checkpoint(cctx, CheckpointChargeAnswered, (&paymentCheckpoint{
				PaymentID: pay.ID, ProviderKey: pay.ProviderKey, ChargeID: c.ID, ChargeStatus: c.Status,
			}).encode())
			cancel()
			if cerr != nil {
				// Phase 3 still runs: its completion is fenced too, and
				// rolls the business write back with it if the lease
				// was lost. (After a 202 the record is complete already.)
				s.log.Warn("payments: checkpoint after the charge not recorded", "payment", pay.ID, "err", cerr)
			}
			s.crash(CrashAfterCheckpoint, op)
		}
		out <- chargeOutcome{charge: c, err: err}
	}()
	return out
}

// applyLater applies a charge's outcome after the request was answered 202.
func (s *Service) applyLater(id string, outcome <-chan chargeOutcome) {
	out := <-outcome
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.db.InTx(ctx, func(tx *repo.Tx) error { return s.applyOutcome(ctx, tx, id, &out) })
	if err != nil {
		// The payment stays pending; reconciliation settles it.
		s.log.Error("payments: applying a charge outcome failed", "payment", id, "err", err)
	}
}

// applyOutcome records the provider's answer for payment id in tx: charged
// → succeeded (order paid), declined → failed (order open again), no answer
// → unknown (order stays paying until reconciliation). An unknown outcome is
// never recorded as failed, and the charge is never retried with a new key.
func (s *Service) applyOutcome(ctx context.Context, tx *repo.Tx, id string, out *chargeOutcome) error {
	now := s.cfg.Now()
	switch {
	case out.err != nil:
		err := tx.TransitionPayment(ctx, id, repo.PaymentUnknown, "provider outcome unknown: "+out.err.Error(), repo.PaymentChange{}, now)
		if errors.Is(err, repo.ErrTransition) {
			return nil // already settled (by reconciliation or another run)
		}
		return err
	case out.charge.Status == provider.ChargeSucceeded:
		return s.settle(ctx, tx, id, repo.PaymentSucceeded, repo.PaymentChange{ChargeID: out.charge.ID}, "provider charged "+out.charge.ID, now)
	default:
		return s.settle(ctx, tx, id, repo.PaymentFailed, repo.PaymentChange{Failure: "declined by the provider"}, "provider declined", now)
	}
}

// settle moves a pending or unknown payment to its final status and its
// order along with it: paid after a success, open again after a failure.
// A payment already settled is left alone.
func (s *Service) settle(ctx context.Context, tx *repo.Tx, id, to string, change repo.PaymentChange, reason string, now time.Time) error {
	err := tx.TransitionPayment(ctx, id, to, reason, change, now)
	if errors.Is(err, repo.ErrTransition) {
		s.log.InfoContext(ctx, "payments: payment already settled", "payment", id, "wanted", to, "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	p, err := tx.Payment(ctx, id)
	if err != nil {
		return err
	}
	orderTo := repo.OrderOpen
	if to == repo.PaymentSucceeded {
		orderTo = repo.OrderPaid
	}
	return tx.TransitionOrder(ctx, p.OrderID, orderTo, "payment "+id+" "+to, now)
}
