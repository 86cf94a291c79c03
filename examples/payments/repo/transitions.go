package repo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// OrderTransitions lists, for each order status, the statuses it may move
// to.
var OrderTransitions = map[string][]string{
	OrderOpen:   {OrderPaying},
	OrderPaying: {OrderPaid, OrderOpen}, // paid, or open again after a failed payment
	OrderPaid:   {},
}

// PaymentTransitions lists, for each payment status, the statuses it may
// move to. Unknown never goes back to pending and never fails without the
// provider's word (reconciliation).
var PaymentTransitions = map[string][]string{
	PaymentPending:   {PaymentSucceeded, PaymentFailed, PaymentUnknown},
	PaymentUnknown:   {PaymentSucceeded, PaymentFailed},
	PaymentSucceeded: {PaymentRefunded},
	PaymentFailed:    {},
	PaymentRefunded:  {},
}

// predecessors returns the statuses from which to may be reached.
func predecessors(table map[string][]string, to string) []string {
	var from []string
	for f, tos := range table {
		if slices.Contains(tos, to) {
			from = append(from, f)
		}
	}
	slices.Sort(from)
	return from
}

// PaymentChange is the data a payment transition may set with its status.
type PaymentChange struct {
	ChargeID string // kept when empty
	Failure  string // kept when empty
}

// TransitionOrder moves order id to status to, for reason. It fails with
// [ErrTransition] when the order's current status may not move to to (it
// reads the current status, checks [OrderTransitions], then runs a
// conditional UPDATE … WHERE status = current AND status IN (allowed) and
// checks that it changed one row), and with [ErrNotFound] when there is no
// such order. The audit row is written in tx.
func (tx *Tx) TransitionOrder(ctx context.Context, id, to, reason string, now time.Time) error {
	from, err := tx.status(ctx, "orders", id)
	if err != nil {
		return err
	}
	allowed := predecessors(OrderTransitions, to)
	if !slices.Contains(allowed, from) {
		return fmt.Errorf("%w: order %s is %s, cannot become %s", ErrTransition, id, from, to)
	}
	q, args := conditionalUpdate("orders", "status = $1, updated_at = $2", []any{to, millis(now)}, id, from, allowed)
	if err := tx.changeOne(ctx, q, args, "order", id, from, to); err != nil {
		return err
	}
	return tx.audit(ctx, "order", id, from, to, reason, now)
}

// TransitionPayment moves payment id to status to, like [Tx.TransitionOrder]
// with [PaymentTransitions], setting the fields of change with it.
func (tx *Tx) TransitionPayment(ctx context.Context, id, to, reason string, change PaymentChange, now time.Time) error {
	from, err := tx.status(ctx, "payments", id)
	if err != nil {
		return err
	}
	allowed := predecessors(PaymentTransitions, to)
	if !slices.Contains(allowed, from) {
		return fmt.Errorf("%w: payment %s is %s, cannot become %s", ErrTransition, id, from, to)
	}
	set := "status = $1, updated_at = $2, " +
		"charge_id = CASE WHEN CAST($3 AS TEXT) = '' THEN charge_id ELSE CAST($3 AS TEXT) END, " +
		"failure = CASE WHEN CAST($4 AS TEXT) = '' THEN failure ELSE CAST($4 AS TEXT) END"
	q, args := conditionalUpdate("payments", set, []any{to, millis(now), change.ChargeID, change.Failure}, id, from, allowed)
	if err := tx.changeOne(ctx, q, args, "payment", id, from, to); err != nil {
		return err
	}
	return tx.audit(ctx, "payment", id, from, to, reason, now)
}

// conditionalUpdate builds UPDATE table SET set WHERE id = … AND status =
// from AND status IN (allowed…), numbering placeholders after setArgs.
func conditionalUpdate(table, set string, setArgs []any, id, from string, allowed []string) (string, []any) {
	args := append(setArgs, id, from)
	n := len(args)
	marks := make([]string, len(allowed))
	for i, s := range allowed {
		args = append(args, s)
		marks[i] = fmt.Sprintf("$%d", n+i+1)
	}
	q := fmt.Sprintf("UPDATE %s SET %s WHERE id = $%d AND status = $%d AND status IN (%s)",
		table, set, n-1, n, strings.Join(marks, ", "))
	return q, args
}

// changeOne runs a conditional UPDATE and checks that it changed one row:
// zero rows means another transaction changed the status first.
func (tx *Tx) changeOne(ctx context.Context, q string, args []any, entity, id, from, to string) error {
	n, err := tx.c.exec(ctx, q, args...)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%w: %s %s is no longer %s, cannot become %s", ErrTransition, entity, id, from, to)
	}
	return nil
}

func (tx *Tx) status(ctx context.Context, table, id string) (string, error) {
	var s string
	err := tx.c.queryRow(ctx, "SELECT status FROM "+table+" WHERE id = $1", id).Scan(&s)
	return s, err
}

// audit records one transition. Its seq follows the entity's last one: the
// transition's conditional UPDATE (or the row's INSERT) holds the entity's
// row lock until commit, so no other transaction audits it meanwhile; the
// unique (entity_id, seq) backs that up.
func (tx *Tx) audit(ctx context.Context, entity, id, from, to, reason string, now time.Time) error {
	_, err := tx.c.exec(ctx,
		"INSERT INTO audit_log (id, entity, entity_id, seq, from_status, to_status, reason, at) "+
			"SELECT $1, $2, $3, COALESCE(MAX(seq), 0) + 1, $4, $5, $6, $7 FROM audit_log WHERE entity_id = $3",
		NewID("aud", now), entity, id, from, to, reason, millis(now))
	return err
}

// NewID returns a new identifier: prefix, "_", 12 hex digits of Unix
// milliseconds (so identifiers sort by creation time) and 16 random hex
// digits.
func NewID(prefix string, now time.Time) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s_%012x%s", prefix, now.UnixMilli(), hex.EncodeToString(b[:]))
}
