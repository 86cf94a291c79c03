package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/examples/payments/provider"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
)

// Mismatch kinds reported by reconciliation.
const (
	// MismatchChargeWithoutPayment: the provider holds a successful charge
	// for which no payment succeeded.
	MismatchChargeWithoutPayment = "charge-without-payment"
	// MismatchPaymentWithoutCharge: a payment succeeded that the provider
	// holds no successful charge for.
	MismatchPaymentWithoutCharge = "payment-without-charge"
	// MismatchAmount: charge and payment disagree on amount or currency.
	MismatchAmount = "amount-differs"
)

// Settlement is one payment reconciliation settled.
type Settlement struct {
	PaymentID string `json:"paymentId"`
	From      string `json:"from"`
	To        string `json:"to"`
	ChargeID  string `json:"chargeId,omitempty"`
}

// Mismatch is a disagreement between our payments and the provider's
// charges, for a person to look at.
type Mismatch struct {
	Kind      string `json:"kind"`
	PaymentID string `json:"paymentId,omitempty"`
	ChargeID  string `json:"chargeId,omitempty"`
	Detail    string `json:"detail"`
}

// Report is the result of one reconciliation run.
type Report struct {
	// Stranded counts what the completer did first, with
	// Config.ResolveWithProvider: idempotency records whose attempt died
	// completed from the provider's record, marked not done for the
	// retry to re-run (AwaitingRetry), or left blocked.
	Stranded   *retrysafe.Stranded `json:"stranded,omitempty"`
	Checked    int                 `json:"checked"`
	Settled    []Settlement        `json:"settled"`
	Mismatches []Mismatch          `json:"mismatches"`
	Errors     []string            `json:"errors"`
}

// completerLimit bounds the records one reconciliation run resolves.
const completerLimit = 1000

// Reconcile first completes stranded idempotency records (with
// Config.ResolveWithProvider, see [Service.CompleteStranded]). Then it
// settles payments whose outcome is open — unknown, or pending
// with no change for minAge (a crashed or lost charge) — by looking the
// charge up at the provider by the payment's key: succeeded if a charge
// exists, failed if the provider confirms there is none (or declined it).
// Unknown payments younger than minAge are left for the next run, so a
// charge still on its way is not declared missing. Then it compares every
// successful charge with the successful payments and reports mismatches.
func (s *Service) Reconcile(ctx context.Context, minAge time.Duration) (*Report, error) {
	rep := &Report{Settled: []Settlement{}, Mismatches: []Mismatch{}, Errors: []string{}}
	if s.completer != nil {
		n, err := s.CompleteStranded(ctx, completerLimit)
		rep.Stranded = &n
		if err != nil {
			rep.Errors = append(rep.Errors, "completer: "+err.Error())
		}
	}
	open, err := s.db.Read().PaymentsByStatus(ctx, s.cfg.Now().Add(-minAge), repo.PaymentUnknown, repo.PaymentPending)
	if err != nil {
		return nil, err
	}
	for _, p := range open {
		rep.Checked++
		st, err := s.settleFromProvider(ctx, p)
		switch {
		case err != nil:
			rep.Errors = append(rep.Errors, fmt.Sprintf("payment %s: %v", p.ID, err))
		case st != nil:
			rep.Settled = append(rep.Settled, *st)
		}
	}
	if err := s.compare(ctx, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// settleFromProvider settles one payment from the provider's record.
func (s *Service) settleFromProvider(ctx context.Context, p *repo.Payment) (*Settlement, error) {
	ch, err := s.provider.Lookup(ctx, p.ProviderKey)
	to, change, reason := repo.PaymentFailed, repo.PaymentChange{Failure: "the provider holds no charge"}, "reconciliation: provider holds no charge"
	switch {
	case errors.Is(err, provider.ErrNoCharge):
	case err != nil:
		return nil, err
	case ch.Status == provider.ChargeSucceeded:
		to, change, reason = repo.PaymentSucceeded, repo.PaymentChange{ChargeID: ch.ID}, "reconciliation: provider charged "+ch.ID
	default:
		change, reason = repo.PaymentChange{Failure: "declined by the provider"}, "reconciliation: provider declined"
	}
	now := s.cfg.Now()
	var settled bool
	err = s.db.InTx(ctx, func(tx *repo.Tx) error {
		cur, err := tx.Payment(ctx, p.ID)
		if err != nil {
			return err
		}
		if cur.Status != repo.PaymentUnknown && cur.Status != repo.PaymentPending {
			return nil // settled meanwhile
		}
		settled = true
		return s.settle(ctx, tx, p.ID, to, change, reason, now)
	})
	if err != nil || !settled {
		return nil, err
	}
	return &Settlement{PaymentID: p.ID, From: p.Status, To: to, ChargeID: change.ChargeID}, nil
}

// compare reports charges and payments that disagree.
func (s *Service) compare(ctx context.Context, rep *Report) error {
	charges, err := s.provider.List(ctx)
	if err != nil {
		return err
	}
	payments, err := s.db.Read().AllPayments(ctx)
	if err != nil {
		return err
	}
	byKey := make(map[string]*repo.Payment, len(payments))
	for _, p := range payments {
		byKey[p.ProviderKey] = p
	}
	charged := make(map[string]bool, len(charges))
	for _, c := range charges {
		if c.Status != provider.ChargeSucceeded {
			continue
		}
		charged[c.Key] = true
		p := byKey[c.Key]
		switch {
		case p == nil:
			rep.Mismatches = append(rep.Mismatches, Mismatch{Kind: MismatchChargeWithoutPayment, ChargeID: c.ID,
				Detail: "no payment has this charge's key"})
		case p.Status != repo.PaymentSucceeded && p.Status != repo.PaymentRefunded:
			rep.Mismatches = append(rep.Mismatches, Mismatch{Kind: MismatchChargeWithoutPayment, ChargeID: c.ID, PaymentID: p.ID,
				Detail: "the payment is " + p.Status})
		case p.Amount != c.Amount || p.Currency != c.Currency:
			rep.Mismatches = append(rep.Mismatches, Mismatch{Kind: MismatchAmount, ChargeID: c.ID, PaymentID: p.ID,
				Detail: fmt.Sprintf("payment %d %s, charge %d %s", p.Amount, p.Currency, c.Amount, c.Currency)})
		}
	}
	for _, p := range payments {
		if (p.Status == repo.PaymentSucceeded || p.Status == repo.PaymentRefunded) && !charged[p.ProviderKey] {
			rep.Mismatches = append(rep.Mismatches, Mismatch{Kind: MismatchPaymentWithoutCharge, PaymentID: p.ID,
				Detail: "the provider holds no successful charge with this payment's key"})
		}
	}
	return nil
}

// postReconcile handles POST /admin/reconcile: one run now, with the
// configured SettleAfter (or ?minAge=0s), answering the report.
func (s *Service) postReconcile(w http.ResponseWriter, r *http.Request) {
	minAge := s.cfg.SettleAfter
	if v := r.URL.Query().Get("minAge"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeProblem(w, problemMalformed("minAge must be a duration such as 30s"))
			return
		}
		minAge = d
	}
	rep, err := s.Reconcile(r.Context(), minAge)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeResponse(w, jsonResponse(http.StatusOK, rep, nil))
}

// reconcileLoop runs Reconcile every interval until Close.
func (s *Service) reconcileLoop(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop.Done():
			return
		case <-t.C:
		}
		rep, err := s.Reconcile(s.stop, s.cfg.SettleAfter)
		switch {
		case err != nil:
			s.log.Error("payments: reconciliation failed", "err", err)
		case len(rep.Settled) > 0 || len(rep.Mismatches) > 0 || len(rep.Errors) > 0:
			s.log.Warn("payments: reconciliation", "settled", len(rep.Settled), "mismatches", rep.Mismatches, "errors", rep.Errors)
		}
	}
}
