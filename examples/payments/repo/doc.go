// Package repo is the payments example's repository layer: orders, payments,
// refunds and the audit log, with the business rules the database enforces.
//
// The SQL is written once and runs on both backends: modernc.org/sqlite
// accepts PostgreSQL's $1-style placeholders, times are integer Unix
// milliseconds and nothing is NULL. Two small adapters supply what differs: a
// database/sql adapter for SQLite ([OpenSQLite]) and a pgx adapter for
// PostgreSQL ([OpenPostgres]). Each also exposes the retrysafe store living in
// the same database, so a [Tx] can complete an idempotency record in the same
// transaction as the business write ([Tx.Complete]).
//
// # Rules in the schema
//
//   - At most one successful payment per order: a unique partial index on
//     payments(order_id) for status succeeded or refunded.
//   - At most one payment in flight per order: a unique partial index for
//     status pending or unknown, so two operations with different keys
//     cannot both charge the provider for one order.
//   - Status values are CHECK-constrained; amounts are positive and a
//     payment's refunded total never exceeds its amount.
//
// # Rules in code
//
// Every status change goes through [Tx.TransitionOrder] or
// [Tx.TransitionPayment]: the change must be listed in [OrderTransitions] or
// [PaymentTransitions], it is a conditional UPDATE … WHERE status IN
// (allowed predecessors) whose affected-row count is checked, and it writes
// an audit row in the same transaction.
package repo
