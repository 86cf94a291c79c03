package retrysafelambda

import (
	"context"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// SQS wraps a handler of one SQS message into a handler of SQS batches
// that runs each message at most once per key and reports the messages
// that failed as partial batch failures (events.SQSEventResponse), so
// that SQS redelivers only those. The event source mapping must have
// ReportBatchItemFailures among its FunctionResponseTypes.
//
// Each message is handled on its own, in the batch's order: its key is
// the messageId (which a redelivery keeps), or the body's member at
// Config.Key when the producer puts a key there (so that a message sent
// twice is handled once); Config.Validate picks the members of the body
// that the fingerprint covers (nil: the whole body). A message whose key
// completed before, in this batch or an earlier one, is acknowledged
// without running fn. A message is reported failed when fn returns an
// error (a stored one as well: its redeliveries replay it until the
// queue's redrive policy moves it to the dead-letter queue), when its
// first run is still in progress or its outcome is unknown, when the
// store fails, when its body is not JSON where Key or Validate need it,
// or when the invocation's deadline has passed. On a FIFO queue (its ARN
// ends in ".fifo") the first failure also fails every later message of
// the batch, unhandled, so that a message group keeps its order.
//
// The returned error is always nil: failures are per message.
func SQS(cfg Config, fn func(context.Context, events.SQSMessage) error) (func(context.Context, events.SQSEvent) (events.SQSEventResponse, error), error) {
	w, err := newWrapper(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		failed := false
		for i, msg := range ev.Records {
			if failed && strings.HasSuffix(msg.EventSourceARN, ".fifo") {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
				continue
			}
			if err := w.sqsMessage(ctx, msg, fn); err != nil {
				w.cfg.Logger.WarnContext(ctx, "retrysafe/lambda: SQS message failed; reported for redelivery", "record", i, "err", err)
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
				failed = true
			}
		}
		return resp, nil
	}, nil
}

// sqsMessage handles one message.
func (w *wrapper) sqsMessage(ctx context.Context, msg events.SQSMessage, fn func(context.Context, events.SQSMessage) error) error {
	body := []byte(msg.Body)
	key := msg.MessageId
	if w.key != nil {
		k, ok, err := w.eventKey(body)
		switch {
		case err != nil:
			return err
		case !ok:
			if err := w.noKey(ctx, "sqs"); err != nil {
				return err
			}
			return fn(ctx, msg)
		}
		key = k
	}
	fp, err := w.payloadFingerprint("sqs", "", "", "", body)
	if err != nil {
		return err
	}
	_, _, err = run(ctx, w, w.cfg.Scope, key, fp, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, fn(ctx, msg)
	})
	return err
}
