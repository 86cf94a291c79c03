package service

import (
	"net/http"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
)

// orderView is an order as the API shows it.
type orderView struct {
	ID        string        `json:"id"`
	Amount    int64         `json:"amount"`
	Currency  string        `json:"currency"`
	Status    string        `json:"status"`
	Payments  []paymentView `json:"payments,omitempty"`
	CreatedAt time.Time     `json:"createdAt"`
}

func viewOrder(o *repo.Order, payments []*repo.Payment) orderView {
	v := orderView{ID: o.ID, Amount: o.Amount, Currency: o.Currency, Status: o.Status, CreatedAt: o.CreatedAt}
	for _, p := range payments {
		v.Payments = append(v.Payments, viewPayment(p))
	}
	return v
}

// paymentView is a payment as the API shows it.
type paymentView struct {
	ID        string    `json:"id"`
	OrderID   string    `json:"orderId"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	Status    string    `json:"status"`
	ChargeID  string    `json:"chargeId,omitempty"`
	Failure   string    `json:"failure,omitempty"`
	Refunded  int64     `json:"refunded"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

func viewPayment(p *repo.Payment) paymentView {
	return paymentView{ID: p.ID, OrderID: p.OrderID, Amount: p.Amount, Currency: p.Currency, Status: p.Status,
		ChargeID: p.ChargeID, Failure: p.Failure, Refunded: p.Refunded, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
}

// paymentResponse is the answer to POST /payments: 201 Created once the
// outcome is final (succeeded or failed), 202 Accepted while it is pending
// or unknown, both with the status resource in Location.
func paymentResponse(p *repo.Payment) *retrysafe.Response {
	status := http.StatusCreated
	if p.Status == repo.PaymentPending || p.Status == repo.PaymentUnknown {
		status = http.StatusAccepted
	}
	return jsonResponse(status, viewPayment(p), http.Header{"Location": {"/payments/" + p.ID}})
}

type refundView struct {
	ID        string    `json:"id"`
	PaymentID string    `json:"paymentId"`
	Amount    int64     `json:"amount"`
	CreatedAt time.Time `json:"createdAt"`
}
