package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"

	"github.com/retrysafe/retrysafe"
)

// MaxAmount is the largest amount accepted, in minor units.
const MaxAmount = 100_000_000

var currencyRE = regexp.MustCompile(`^[A-Z]{3}$`)

// decodeJSON reads one JSON object into v, refusing unknown fields and
// trailing data; it returns a 400 problem when the body is not that.
func decodeJSON(r *http.Request, v any) *problem {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return problemMalformed("The body must be a JSON object with the documented fields: " + err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return problemMalformed("The body must hold a single JSON object.")
	}
	return nil
}

// validator is a request body that can check its own fields.
type validator interface{ validate() *problem }

// readRequest decodes the JSON body into v and validates it. On failure it
// answers the problem and releases the idempotency key: nothing ran, so the
// key is not spent and a corrected request may use it (Stripe does not save
// validation failures either).
func readRequest(w http.ResponseWriter, r *http.Request, v validator) bool {
	p := decodeJSON(r, v)
	if p == nil {
		p = v.validate()
	}
	if p == nil {
		return true
	}
	if op := retrysafe.OperationFromContext(r.Context()); op != nil {
		op.Release()
	}
	writeProblem(w, p)
	return false
}

// checkMoney appends the errors of an amount and currency.
func checkMoney(errs []fieldError, amount int64, currency string) []fieldError {
	if amount <= 0 || amount > MaxAmount {
		errs = append(errs, fieldError{"amount", fmt.Sprintf("must be an integer number of minor units between 1 and %d", MaxAmount)})
	}
	if !currencyRE.MatchString(currency) {
		errs = append(errs, fieldError{"currency", "must be an ISO 4217 code such as UAH"})
	}
	return errs
}

type orderRequest struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

func (o *orderRequest) validate() *problem {
	if errs := checkMoney(nil, o.Amount, o.Currency); errs != nil {
		return problemInvalid(errs)
	}
	return nil
}

type paymentRequest struct {
	OrderID  string `json:"orderId"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

func (p *paymentRequest) validate() *problem {
	var errs []fieldError
	if p.OrderID == "" || len(p.OrderID) > 64 {
		errs = append(errs, fieldError{"orderId", "required, at most 64 characters"})
	}
	if errs = checkMoney(errs, p.Amount, p.Currency); errs != nil {
		return problemInvalid(errs)
	}
	return nil
}

type refundRequest struct {
	Amount int64 `json:"amount"`
}

func (f *refundRequest) validate() *problem {
	if f.Amount <= 0 || f.Amount > MaxAmount {
		return problemInvalid([]fieldError{{"amount", "must be a positive integer number of minor units"}})
	}
	return nil
}
