package consumers

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// HandleMsg handles one JetStream message from a consumer with explicit
// acks, keyed by its Nats-Msg-Id header (the id the publisher gave with
// jetstream.WithMsgID), and settles it after Do returns: Ack, Nak (Retry)
// or Term (Discard). The returned error is the settling error.
//
// A message that is not acknowledged within the consumer's AckWait — the
// process died after the effect, or is still working — is redelivered,
// possibly to another subscriber; Do makes that delivery wait for the
// first one's result, or replays it, instead of applying the effect again.
// For effects that may outlast AckWait, call msg.InProgress while they run,
// or choose a longer AckWait, to avoid the redelivery in the first place.
func (c *Consumer) HandleMsg(ctx context.Context, msg jetstream.Msg) (Result, error) {
	id := msg.Headers().Get(jetstream.MsgIDHeader)
	r := c.Handle(ctx, id, msg.Data())
	var err error
	switch r.Action {
	case Ack:
		err = msg.Ack()
	case Retry:
		err = msg.Nak()
	default:
		err = msg.TermWithReason(r.Err.Error())
	}
	if r.Err != nil || err != nil {
		attrs := []any{"subject", msg.Subject()}
		if md, merr := msg.Metadata(); merr == nil {
			attrs = append(attrs, "stream", md.Stream, "stream_seq", md.Sequence.Stream, "num_delivered", md.NumDelivered)
		}
		c.log(ctx, id, r, err, attrs...)
	}
	return r, err
}

// ConsumeJetStream handles cons's messages one at a time with
// [Consumer.HandleMsg] until ctx ends (it returns ctx's error) or the
// message stream fails. cons should use jetstream.AckExplicitPolicy.
func (c *Consumer) ConsumeJetStream(ctx context.Context, cons jetstream.Consumer) error {
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		msg, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) && ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		_, _ = c.HandleMsg(ctx, msg)
	}
}
