package service

import (
	"context"
	"net/http"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
)

// createOrder handles POST /orders {"amount":49900,"currency":"UAH"}.
func (s *Service) createOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	op := retrysafe.OperationFromContext(ctx)
	var req orderRequest
	if !readRequest(w, r, &req) {
		return
	}
	opKey := operationKey(op)
	var resp *retrysafe.Response
	err := s.db.InTx(ctx, func(tx *repo.Tx) error {
		o, err := tx.OrderByOpKey(ctx, opKey) // an earlier run of this operation
		if repo.IsNotFound(err) {
			now := s.cfg.Now()
			o = &repo.Order{ID: repo.NewID("ord", now), Amount: req.Amount, Currency: req.Currency, CreatedAt: now}
			err = tx.InsertOrder(ctx, o, opKey)
		}
		if err != nil {
			return err
		}
		resp = jsonResponse(http.StatusCreated, viewOrder(o, nil), http.Header{"Location": {"/orders/" + o.ID}})
		return tx.Complete(ctx, op.CompleteParams(resp))
	})
	s.finish(ctx, w, op, resp, err)
}

// finish ends a handler that completed its idempotency record in its own
// transaction: after the commit, mark the operation completed and write the
// stored answer. When the transaction failed nothing was stored: release
// the key (a retry with the same key runs again, and finds whatever an
// earlier run recorded) and ask the client to retry.
func (s *Service) finish(ctx context.Context, w http.ResponseWriter, op *retrysafe.Operation, resp *retrysafe.Response, err error) {
	if err != nil {
		s.log.ErrorContext(ctx, "payments: transaction failed; the key is released for a retry", "err", err)
		op.Release()
		writeProblem(w, problemRetry)
		return
	}
	op.MarkCompleted()
	writeResponse(w, resp)
}

// getOrder handles GET /orders/{id}.
func (s *Service) getOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	rd := s.db.Read()
	o, err := rd.Order(ctx, r.PathValue("id"))
	if repo.IsNotFound(err) {
		writeProblem(w, problemNotFound("order"))
		return
	}
	var payments []*repo.Payment
	if err == nil {
		payments, err = rd.PaymentsOfOrder(ctx, o.ID)
	}
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeResponse(w, jsonResponse(http.StatusOK, viewOrder(o, payments), nil))
}

func (s *Service) internalError(w http.ResponseWriter, r *http.Request, err error) {
	s.log.ErrorContext(r.Context(), "payments: internal error", "path", r.URL.Path, "err", err)
	writeProblem(w, newProblem(http.StatusInternalServerError, "internal", "internal error", ""))
}
