package repo

import (
	"errors"
	"time"
)

// Order statuses.
const (
	OrderOpen   = "open"   // waiting for a payment
	OrderPaying = "paying" // a payment is in flight (pending or unknown)
	OrderPaid   = "paid"   // a payment succeeded
)

// Payment statuses.
const (
	// PaymentPending: recorded, the provider has not answered yet.
	PaymentPending = "pending"
	// PaymentUnknown: the provider call ended without a definite answer
	// (timeout, dropped connection, 5xx after retries). Only reconciliation
	// settles it; it is never failed or retried with a new key.
	PaymentUnknown = "unknown"
	// PaymentSucceeded: the provider charged the payment.
	PaymentSucceeded = "succeeded"
	// PaymentFailed: the provider declined, or confirmed it holds no charge.
	PaymentFailed = "failed"
	// PaymentRefunded: the whole amount was refunded.
	PaymentRefunded = "refunded"
)

// Errors returned by the repository. Adapters translate driver errors into
// them.
var (
	// ErrNotFound: no row matched.
	ErrNotFound = errors.New("repo: not found")
	// ErrUnique: a unique constraint rejected the write (the business rules
	// at most one successful, or one in-flight, payment per order).
	ErrUnique = errors.New("repo: unique constraint violated")
	// ErrTransition: the requested status change is not allowed from the
	// row's current status (checked in code and by the conditional UPDATE).
	ErrTransition = errors.New("repo: status transition not allowed")
	// ErrRefundExceeds: a refund would take the refunded total above the
	// payment's amount.
	ErrRefundExceeds = errors.New("repo: refund exceeds the payment's remaining amount")
)

// Order is something to pay for.
type Order struct {
	ID        string
	Amount    int64 // minor units (kopiykas, cents)
	Currency  string
	Status    string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Payment is one attempt to pay an order, made by one idempotent operation.
type Payment struct {
	ID      string
	OrderID string
	// OpKey identifies the idempotent operation that created the payment
	// (a hash of its scope and Idempotency-Key); unique, so an operation
	// can never create a second payment. (An attempt that resumes the
	// operation finds its payment through the idempotency record's
	// checkpoint.)
	OpKey string
	// ProviderKey is the Idempotency-Key sent to the provider, derived from
	// the operation; reconciliation looks the charge up by it.
	ProviderKey string
	Amount      int64
	Currency    string
	Status      string
	ChargeID    string // the provider's charge, once known
	Failure     string // why it failed, when it did
	Refunded    int64  // refunded total
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Refund returns money of a succeeded payment.
type Refund struct {
	ID        string
	PaymentID string
	OpKey     string
	Amount    int64
	CreatedAt time.Time
}

// AuditEntry is one status transition, written in the transaction that made
// it.
type AuditEntry struct {
	ID       string
	Entity   string // "order" or "payment"
	EntityID string
	Seq      int64  // 1 for the entity's first entry, then 2, …
	From     string // "" when the row was created
	To       string
	Reason   string
	At       time.Time
}

func millis(t time.Time) int64 { return t.UnixMilli() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
