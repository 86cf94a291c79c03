// Package consumers shows how a queue consumer applies each message's
// effect exactly once with [retrysafe.Run], on RabbitMQ (amqp091-go) and
// NATS JetStream (nats.go/jetstream).
//
// Brokers deliver at least once: a message comes again when the publisher
// sends it twice, when a consumer dies after the effect but before its ack,
// when a transient failure asks for a redelivery, and when the broker gives
// up on a slow consumer and hands the message to another one while the
// first is still working. The pattern is the same on every broker:
//
//  1. Key [retrysafe.Run] by the message id the publisher set (AMQP
//     MessageId, JetStream Nats-Msg-Id), with a fingerprint of the body.
//  2. Apply the effect inside Do. A [retrysafe.Permanent] failure is
//     stored: every redelivery gets the same *retrysafe.FailedError back.
//     Any other error releases the key.
//  3. Settle the message after Do returns, as [Consumer.Handle]'s [Action]
//     says: [Ack] after a success, a replay or a permanent failure;
//     [Retry] (nack with requeue, JetStream Nak) after a transient failure;
//     [Discard] (reject, JetStream Term) when the message can never be
//     processed (no id, or an id reused for a different body).
//
// [Ledger] is the effect: it credits an account in SQLite and appends one
// row per application to a ledger, so tests can count how often an effect
// really happened. [Ledger.CreditAndComplete] commits the credit and the
// retrysafe record's completion in one transaction, which closes the gap
// left by a crash between the effect and the completion (see the package
// README and docs/guarantees.md).
package consumers
