// Package service is the payments example's HTTP API: orders, payments,
// refunds, reconciliation and a checkout page, with every layer of
// protection against duplicate effects that the article on idempotency in
// APIs names:
//
//  1. The Idempotency-Key at the API: every POST goes through retrysafe's
//     middleware with RequireKey; a retry gets the stored answer.
//  2. Unique constraints in the database: at most one successful (and one
//     in-flight) payment per order; one payment per operation.
//  3. An idempotent call to the provider: the charge carries a key derived
//     from the operation (client.DeriveKey), sent through client.Transport,
//     so a retry — ours or the transport's — never charges twice.
//  4. Business-state checks: paying a paid order is refused (409) even with
//     a new key; only a succeeded payment can be refunded, up to its amount;
//     status changes are conditional updates along allowed transitions.
//  5. Audit and reconciliation: every transition is audited in its
//     transaction; payments whose outcome is unknown are settled by asking
//     the provider by key, and mismatches are reported.
//
// The payment row's final state and the idempotency record's completion
// commit in one transaction (the store's CompleteTx), then the handler calls
// the operation's MarkCompleted and writes exactly the stored answer.
//
// Between them, checkpoints in the idempotency record are the recovery
// points of POST /payments: "payment-recorded" commits with phase 1
// (CheckpointTx), "charge-answered" follows the provider's answer. An
// attempt that takes over from a crashed one reads the checkpoint
// (Operation.Resumed) and charges again with the same derived key instead
// of starting over; with Config.ResolveWithProvider a Resolver asks the
// provider first. See docs/unknown-outcomes.md.
package service
