package service

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/client"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
)

// createPayment handles POST /payments {"orderId","amount","currency"}.
// It runs in three phases with a recovery point after each of the first
// two, as brandur's atomic phases do:
//
// Phase 1 records the intent in one transaction: the order moves open →
// paying (a conditional update: a paid order gets 409 "order already paid"
// whatever the key), a pending payment is inserted with the provider key
// derived from this operation, and the checkpoint "payment-recorded" is
// written to the idempotency record with the store's CheckpointTx, so it
// commits with them.
//
// Phase 2 charges the provider with that key, outside any transaction, and
// checkpoints the answer ("charge-answered").
//
// Phase 3 applies the outcome and completes the idempotency record in one
// transaction (CompleteTx), then answers exactly what was stored: 201 with
// the final payment, or 202 with Location when the outcome is unknown, or
// when the provider is slower than AcceptAfter (the charge then finishes in
// the background and GET /payments/{id} shows it).
//
// An attempt that takes over from one that died (Attempt() > 1) reads the
// last checkpoint with Resumed and goes on from there: it charges again
// with the same derived key, and the provider answers from its record
// instead of charging twice. Without a checkpoint the dead attempt never
// got past phase 1, and this one starts from the beginning.
func (s *Service) createPayment(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	op := retrysafe.OperationFromContext(ctx)
	var req paymentRequest
	if !readRequest(w, r, &req) {
		return
	}
	pay, err := s.resumedPayment(ctx, op)
	if err != nil {
		s.abandon(ctx, w, op, err)
		return
	}
	if pay == nil {
		var prob *problem
		providerKey, _ := client.DeriveKey(ctx, "psp-charge")
		pay, prob, err = s.startPayment(ctx, op, &req, providerKey)
		switch {
		case err != nil:
			s.finish(ctx, w, op, nil, err) // rolled back: nothing ran, the key is released
			return
		case prob != nil:
			writeProblem(w, prob) // stored by the middleware: a retry gets the same problem
			return
		}
	}

	if pay.Status != repo.PaymentPending { // resumed: the outcome is already recorded
		resp, err := s.completePayment(ctx, op, pay.ID, nil)
		s.finishCharged(ctx, w, op, resp, err)
		return
	}
	outcome := s.charge(ctx, op, pay)
	timer := time.NewTimer(s.cfg.AcceptAfter)
	defer timer.Stop()
	var resp *retrysafe.Response
	select {
	case out := <-outcome:
		resp, err = s.completePayment(ctx, op, pay.ID, &out)
	case <-timer.C:
		// The provider is slow: answer 202 now and let the charge finish
		// in the background; the client polls the payment.
		s.spawn(func() { s.applyLater(pay.ID, outcome) })
		resp, err = s.completePayment(ctx, op, pay.ID, nil)
	}
	s.finishCharged(ctx, w, op, resp, err)
}

// startPayment is phase 1. It returns the operation's new payment, or a
// problem (and rolls back) when business state forbids paying.
func (s *Service) startPayment(ctx context.Context, op *retrysafe.Operation, req *paymentRequest, providerKey string) (pay *repo.Payment, prob *problem, err error) {
	opKey := operationKey(op)
	err = s.db.InTx(ctx, func(tx *repo.Tx) error {
		pay, prob = nil, nil
		order, err := tx.Order(ctx, req.OrderID)
		if repo.IsNotFound(err) {
			prob = problemNotFound("order")
			return errProblem
		}
		if err != nil {
			return err
		}
		if order.Amount != req.Amount || order.Currency != req.Currency {
			prob = problemAmountMismatch
			return errProblem
		}
		if prob = orderConflict(order.Status); prob != nil {
			return errProblem
		}
		now := s.cfg.Now()
		pay = &repo.Payment{ID: repo.NewID("pay", now), OrderID: order.ID, OpKey: opKey, ProviderKey: providerKey,
			Amount: req.Amount, Currency: req.Currency, CreatedAt: now}
		err = tx.TransitionOrder(ctx, order.ID, repo.OrderPaying, "payment "+pay.ID+" started", now)
		if errors.Is(err, repo.ErrTransition) {
			// Changed since we read it: another payment got there first.
			if cur, rerr := tx.Order(ctx, order.ID); rerr == nil {
				prob = orderConflict(cur.Status)
			}
			if prob == nil {
				prob = problemOrderBusy
			}
			return errProblem
		}
		if err != nil {
			return err
		}
		err = tx.InsertPayment(ctx, pay)
		if errors.Is(err, repo.ErrUnique) {
			prob = problemOrderBusy // the unique indexes back the order's status up
			return errProblem
		}
		if err != nil {
			return err
		}
		// The recovery point, in the same transaction: a later attempt
		// finds the payment exactly when it exists.
		return tx.Checkpoint(ctx, s.checkpointParams(op, CheckpointPaymentRecorded,
			&paymentCheckpoint{PaymentID: pay.ID, ProviderKey: pay.ProviderKey}))
	})
	if errors.Is(err, errProblem) {
		return nil, prob, nil
	}
	return pay, nil, err
}

// orderConflict returns the problem of paying an order in status, or nil
// when it can be paid.
func orderConflict(status string) *problem {
	switch status {
	case repo.OrderPaid:
		return problemOrderPaid
	case repo.OrderPaying:
		return problemOrderBusy
	}
	return nil
}

// completePayment is phase 3: in one transaction, apply the provider's
// outcome (when out is not nil), read the payment, and complete the
// idempotency record with the answer built from it. It returns that answer.
func (s *Service) completePayment(ctx context.Context, op *retrysafe.Operation, id string, out *chargeOutcome) (*retrysafe.Response, error) {
	var resp *retrysafe.Response
	err := s.db.InTx(ctx, func(tx *repo.Tx) error {
		if out != nil {
			if err := s.applyOutcome(ctx, tx, id, out); err != nil {
				return err
			}
		}
		p, err := tx.Payment(ctx, id)
		if err != nil {
			return err
		}
		resp = paymentResponse(p)
		return tx.Complete(ctx, op.CompleteParams(resp))
	})
	return resp, err
}

// finishCharged is finish for an attempt past phase 1: a failed phase 3
// must not release the key (the charge may have happened, and the
// checkpoint would go with the record), so it abandons the attempt
// instead. The client gets 503 and retries with the same key; the retry
// gets 409 outcome-unknown until the lease runs out, and then the attempt
// that takes over, or the Resolver, resumes from the checkpoint.
func (s *Service) finishCharged(ctx context.Context, w http.ResponseWriter, op *retrysafe.Operation, resp *retrysafe.Response, err error) {
	if err != nil {
		s.abandon(ctx, w, op, err)
		return
	}
	s.finish(ctx, w, op, resp, nil)
}

// abandon marks op's outcome unknown and answers 503: retry with the same
// key.
func (s *Service) abandon(ctx context.Context, w http.ResponseWriter, op *retrysafe.Operation, err error) {
	s.log.ErrorContext(ctx, "payments: the payment's outcome could not be recorded; the attempt is abandoned for a later one to resume", "err", err)
	op.Abandon()
	writeProblem(w, problemRetry)
}

// getPayment handles GET /payments/{id}: the status resource to poll.
func (s *Service) getPayment(w http.ResponseWriter, r *http.Request) {
	p, err := s.db.Read().Payment(r.Context(), r.PathValue("id"))
	switch {
	case repo.IsNotFound(err):
		writeProblem(w, problemNotFound("payment"))
	case err != nil:
		s.internalError(w, r, err)
	default:
		w.Header().Set("Cache-Control", "no-store")
		writeResponse(w, jsonResponse(http.StatusOK, viewPayment(p), nil))
	}
}
