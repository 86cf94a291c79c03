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
//
// Phase 1 records the intent in one transaction: the order moves open →
// paying (a conditional update: a paid order gets 409 "order already paid"
// whatever the key) and a pending payment is inserted with the provider key
// derived from this operation. A re-run of the same operation (after a
// crash, when its lease was taken over) finds that payment instead.
//
// Phase 2 charges the provider outside any transaction.
//
// Phase 3 applies the outcome and completes the idempotency record in one
// transaction, then answers exactly what was stored: 201 with the final
// payment, or 202 with Location when the outcome is unknown, or when the
// provider is slower than AcceptAfter (the charge then finishes in the
// background and GET /payments/{id} shows it).
func (s *Service) createPayment(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	op := retrysafe.OperationFromContext(ctx)
	var req paymentRequest
	if !readRequest(w, r, &req) {
		return
	}
	providerKey, _ := client.DeriveKey(ctx, "psp-charge")
	pay, prob, err := s.startPayment(ctx, &req, operationKey(op), providerKey)
	switch {
	case err != nil:
		s.finish(ctx, w, op, nil, err)
		return
	case prob != nil:
		writeProblem(w, prob) // stored by the middleware: a retry gets the same problem
		return
	}

	if pay.Status != repo.PaymentPending { // a re-run: the outcome is already recorded
		resp, err := s.completePayment(ctx, op, pay.ID, nil)
		s.finish(ctx, w, op, resp, err)
		return
	}
	outcome := s.charge(pay)
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
	s.finish(ctx, w, op, resp, err)
}

// startPayment is phase 1. It returns the operation's payment, or a problem
// (and rolls back) when business state forbids paying.
func (s *Service) startPayment(ctx context.Context, req *paymentRequest, opKey, providerKey string) (pay *repo.Payment, prob *problem, err error) {
	err = s.db.InTx(ctx, func(tx *repo.Tx) error {
		pay, prob = nil, nil
		p, err := tx.PaymentByOpKey(ctx, opKey)
		if err == nil {
			pay = p
			return nil
		}
		if !repo.IsNotFound(err) {
			return err
		}
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
		return err
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
