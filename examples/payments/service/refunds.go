package service

import (
	"errors"
	"net/http"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
)

// createRefund handles POST /payments/{id}/refunds {"amount":…}: only a
// succeeded payment can be refunded, and refunds never add up to more than
// its amount (a conditional update). The refund and the idempotency
// completion commit together.
func (s *Service) createRefund(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	op := retrysafe.OperationFromContext(ctx)
	var req refundRequest
	if !readRequest(w, r, &req) {
		return
	}
	opKey := operationKey(op)
	paymentID := r.PathValue("id")
	var (
		resp *retrysafe.Response
		prob *problem
	)
	err := s.db.InTx(ctx, func(tx *repo.Tx) error {
		f, err := tx.RefundByOpKey(ctx, opKey) // an earlier run of this operation
		if repo.IsNotFound(err) {
			now := s.cfg.Now()
			f = &repo.Refund{ID: repo.NewID("ref", now), PaymentID: paymentID, OpKey: opKey, Amount: req.Amount, CreatedAt: now}
			err = tx.InsertRefund(ctx, f)
		}
		switch {
		case repo.IsNotFound(err):
			prob = problemNotFound("payment")
		case errors.Is(err, repo.ErrTransition):
			prob = problemNotRefundable
		case errors.Is(err, repo.ErrRefundExceeds):
			prob = problemRefundExceeds
		case err != nil:
			return err
		}
		if prob != nil {
			return errProblem
		}
		resp = jsonResponse(http.StatusCreated, refundView{ID: f.ID, PaymentID: f.PaymentID, Amount: f.Amount, CreatedAt: f.CreatedAt},
			http.Header{"Location": {"/payments/" + f.PaymentID}})
		return tx.Complete(ctx, op.CompleteParams(resp))
	})
	if errors.Is(err, errProblem) {
		writeProblem(w, prob)
		return
	}
	s.finish(ctx, w, op, resp, err)
}
