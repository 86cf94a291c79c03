package service

import (
	"encoding/json"
	"net/http"

	"github.com/retrysafe/retrysafe"
)

// ProblemBase prefixes the "type" of the service's problem responses. The
// types are listed in the example's README.
const ProblemBase = "https://retrysafe.dev/problems/examples/payments/"

// problem is an RFC 9457 problem details object with the field errors of a
// validation failure.
type problem struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail,omitempty"`
	Errors []fieldError `json:"errors,omitempty"`
}

type fieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

func newProblem(status int, slug, title, detail string) *problem {
	return &problem{Type: ProblemBase + slug, Title: title, Status: status, Detail: detail}
}

// The service's problems.
func problemMalformed(detail string) *problem {
	return newProblem(http.StatusBadRequest, "malformed-request", "Malformed request", detail)
}

func problemInvalid(errs []fieldError) *problem {
	p := newProblem(http.StatusUnprocessableEntity, "invalid-request", "Invalid request", "Some fields are invalid.")
	p.Errors = errs
	return p
}

func problemNotFound(what string) *problem {
	return newProblem(http.StatusNotFound, "not-found", what+" not found", "")
}

var (
	problemOrderPaid = newProblem(http.StatusConflict, "order-already-paid", "order already paid",
		"This order has a successful payment; it cannot be paid again, whatever the Idempotency-Key.")
	problemOrderBusy = newProblem(http.StatusConflict, "payment-in-progress", "payment in progress",
		"Another payment of this order is in progress. Check the order later.")
	problemAmountMismatch = newProblem(http.StatusUnprocessableEntity, "amount-mismatch", "amount does not match the order",
		"The payment's amount and currency must equal the order's.")
	problemNotRefundable = newProblem(http.StatusConflict, "payment-not-refundable", "payment not refundable",
		"Only a succeeded payment can be refunded.")
	problemRefundExceeds = newProblem(http.StatusUnprocessableEntity, "refund-exceeds-payment", "refund exceeds the payment",
		"The refunds of a payment may not add up to more than its amount.")
	problemRetry = newProblem(http.StatusServiceUnavailable, "temporarily-unavailable", "temporarily unavailable",
		"The request could not be completed; nothing is lost. Retry with the same Idempotency-Key.")
)

// response returns p as a stored-able answer.
func (p *problem) response() *retrysafe.Response {
	body, _ := json.Marshal(p)
	return &retrysafe.Response{
		Status: p.Status,
		Header: http.Header{"Content-Type": {retrysafe.ContentTypeProblem}},
		Body:   append(body, '\n'),
	}
}

// jsonResponse returns v as a JSON answer with status and extra headers.
func jsonResponse(status int, v any, header http.Header) *retrysafe.Response {
	body, err := json.Marshal(v)
	if err != nil {
		return newProblem(http.StatusInternalServerError, "internal", "internal error", "").response()
	}
	h := http.Header{"Content-Type": {"application/json"}}
	for k, vs := range header {
		h[k] = vs
	}
	return &retrysafe.Response{Status: status, Header: h, Body: append(body, '\n')}
}

// writeResponse writes resp exactly: the answer the idempotency record
// stores and the one the first caller gets are the same bytes.
func writeResponse(w http.ResponseWriter, resp *retrysafe.Response) {
	for k, vs := range resp.Header {
		w.Header()[k] = append([]string(nil), vs...)
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

func writeProblem(w http.ResponseWriter, p *problem) { writeResponse(w, p.response()) }
