package repo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

const orderColumns = "id, amount, currency, status, created_at, updated_at"

func scanOrder(r row) (*Order, error) {
	var o Order
	var created, updated int64
	if err := r.Scan(&o.ID, &o.Amount, &o.Currency, &o.Status, &created, &updated); err != nil {
		return nil, err
	}
	o.CreatedAt, o.UpdatedAt = fromMillis(created), fromMillis(updated)
	return &o, nil
}

const paymentColumns = "id, order_id, op_key, provider_key, amount, currency, status, charge_id, failure, refunded, created_at, updated_at"

func scanPayment(r row) (*Payment, error) {
	var p Payment
	var created, updated int64
	if err := r.Scan(&p.ID, &p.OrderID, &p.OpKey, &p.ProviderKey, &p.Amount, &p.Currency, &p.Status,
		&p.ChargeID, &p.Failure, &p.Refunded, &created, &updated); err != nil {
		return nil, err
	}
	p.CreatedAt, p.UpdatedAt = fromMillis(created), fromMillis(updated)
	return &p, nil
}

// Order returns the order with id, or [ErrNotFound].
func (r Reader) Order(ctx context.Context, id string) (*Order, error) {
	return scanOrder(r.q.queryRow(ctx, "SELECT "+orderColumns+" FROM orders WHERE id = $1", id))
}

// OrderByOpKey returns the order created by the operation opKey, or
// [ErrNotFound].
func (r Reader) OrderByOpKey(ctx context.Context, opKey string) (*Order, error) {
	return scanOrder(r.q.queryRow(ctx, "SELECT "+orderColumns+" FROM orders WHERE op_key = $1", opKey))
}

// Payment returns the payment with id, or [ErrNotFound].
func (r Reader) Payment(ctx context.Context, id string) (*Payment, error) {
	return scanPayment(r.q.queryRow(ctx, "SELECT "+paymentColumns+" FROM payments WHERE id = $1", id))
}

// PaymentByOpKey returns the payment created by the operation opKey, or
// [ErrNotFound].
func (r Reader) PaymentByOpKey(ctx context.Context, opKey string) (*Payment, error) {
	return scanPayment(r.q.queryRow(ctx, "SELECT "+paymentColumns+" FROM payments WHERE op_key = $1", opKey))
}

// PaymentsByStatus returns the payments in any of statuses last updated
// before before (all of them when before is zero), oldest first.
func (r Reader) PaymentsByStatus(ctx context.Context, before time.Time, statuses ...string) ([]*Payment, error) {
	if len(statuses) == 0 {
		return nil, errors.New("repo: no statuses")
	}
	args := []any{}
	marks := make([]string, len(statuses))
	for i, s := range statuses {
		args = append(args, s)
		marks[i] = fmt.Sprintf("$%d", i+1)
	}
	q := "SELECT " + paymentColumns + " FROM payments WHERE status IN (" + strings.Join(marks, ", ") + ")"
	if !before.IsZero() {
		args = append(args, millis(before))
		q += fmt.Sprintf(" AND updated_at < $%d", len(args))
	}
	return r.payments(ctx, q+" ORDER BY updated_at, id", args...)
}

// PaymentsOfOrder returns the payments of order orderID, oldest first.
func (r Reader) PaymentsOfOrder(ctx context.Context, orderID string) ([]*Payment, error) {
	return r.payments(ctx, "SELECT "+paymentColumns+" FROM payments WHERE order_id = $1 ORDER BY id", orderID)
}

// AllPayments returns every payment, oldest first.
func (r Reader) AllPayments(ctx context.Context) ([]*Payment, error) {
	return r.payments(ctx, "SELECT "+paymentColumns+" FROM payments ORDER BY id")
}

func (r Reader) payments(ctx context.Context, q string, args ...any) ([]*Payment, error) {
	rs, err := r.q.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []*Payment
	for rs.Next() {
		p, err := scanPayment(rs)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rs.Err()
}

// Audit returns the audit entries of an order or payment, in order.
func (r Reader) Audit(ctx context.Context, entityID string) ([]*AuditEntry, error) {
	rs, err := r.q.query(ctx,
		"SELECT id, entity, entity_id, seq, from_status, to_status, reason, at FROM audit_log WHERE entity_id = $1 ORDER BY seq", entityID)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []*AuditEntry
	for rs.Next() {
		var e AuditEntry
		var at int64
		if err := rs.Scan(&e.ID, &e.Entity, &e.EntityID, &e.Seq, &e.From, &e.To, &e.Reason, &at); err != nil {
			return nil, err
		}
		e.At = fromMillis(at)
		out = append(out, &e)
	}
	return out, rs.Err()
}

// InsertOrder creates an open order made by operation opKey and audits it.
func (tx *Tx) InsertOrder(ctx context.Context, o *Order, opKey string) error {
	o.Status = OrderOpen
	o.CreatedAt = fromMillis(millis(o.CreatedAt)) // as stored
	_, err := tx.c.exec(ctx,
		"INSERT INTO orders (id, amount, currency, status, op_key, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6)",
		o.ID, o.Amount, o.Currency, o.Status, opKey, millis(o.CreatedAt))
	if err != nil {
		return err
	}
	o.UpdatedAt = o.CreatedAt
	return tx.audit(ctx, "order", o.ID, "", o.Status, "created", o.CreatedAt)
}

// InsertPayment creates a pending payment and audits it. It fails with
// [ErrUnique] when the order already has a payment in flight or a
// successful one, or when the operation already created a payment.
func (tx *Tx) InsertPayment(ctx context.Context, p *Payment) error {
	p.Status = PaymentPending
	p.CreatedAt = fromMillis(millis(p.CreatedAt)) // as stored
	_, err := tx.c.exec(ctx,
		"INSERT INTO payments (id, order_id, op_key, provider_key, amount, currency, status, created_at, updated_at) "+
			"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)",
		p.ID, p.OrderID, p.OpKey, p.ProviderKey, p.Amount, p.Currency, p.Status, millis(p.CreatedAt))
	if err != nil {
		return err
	}
	p.UpdatedAt = p.CreatedAt
	return tx.audit(ctx, "payment", p.ID, "", p.Status, "created", p.CreatedAt)
}

// RefundByOpKey returns the refund made by operation opKey, or
// [ErrNotFound].
func (r Reader) RefundByOpKey(ctx context.Context, opKey string) (*Refund, error) {
	var f Refund
	var created int64
	err := r.q.queryRow(ctx, "SELECT id, payment_id, op_key, amount, created_at FROM refunds WHERE op_key = $1", opKey).
		Scan(&f.ID, &f.PaymentID, &f.OpKey, &f.Amount, &created)
	if err != nil {
		return nil, err
	}
	f.CreatedAt = fromMillis(created)
	return &f, nil
}

// InsertRefund records refund f of a succeeded payment: one conditional
// UPDATE adds the amount to the payment's refunded total only while the
// payment is succeeded and the total stays within its amount, and moves it
// to refunded when the total reaches the amount (audited). It fails with
// [ErrTransition] when the payment is not succeeded and with
// [ErrRefundExceeds] when the amount is too large.
func (tx *Tx) InsertRefund(ctx context.Context, f *Refund) error {
	p, err := scanPayment(tx.c.queryRow(ctx, "SELECT "+paymentColumns+" FROM payments WHERE id = $1", f.PaymentID))
	if err != nil {
		return err
	}
	f.CreatedAt = fromMillis(millis(f.CreatedAt)) // as stored
	if p.Status != PaymentSucceeded {
		return fmt.Errorf("%w: payment %s is %s, only a succeeded payment can be refunded", ErrTransition, p.ID, p.Status)
	}
	if f.Amount > p.Amount-p.Refunded {
		return fmt.Errorf("%w: %d requested, %d left", ErrRefundExceeds, f.Amount, p.Amount-p.Refunded)
	}
	n, err := tx.c.exec(ctx,
		"UPDATE payments SET refunded = refunded + $1, updated_at = $2 WHERE id = $3 AND status = $4 AND refunded + $1 <= amount",
		f.Amount, millis(f.CreatedAt), p.ID, PaymentSucceeded)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%w: payment %s changed concurrently", ErrTransition, p.ID)
	}
	if _, err := tx.c.exec(ctx,
		"INSERT INTO refunds (id, payment_id, op_key, amount, created_at) VALUES ($1, $2, $3, $4, $5)",
		f.ID, f.PaymentID, f.OpKey, f.Amount, millis(f.CreatedAt)); err != nil {
		return err
	}
	if f.Amount == p.Amount-p.Refunded {
		return tx.TransitionPayment(ctx, p.ID, PaymentRefunded, "refunded in full by "+f.ID, PaymentChange{}, f.CreatedAt)
	}
	return nil
}
