package consumers

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
)

// HandleDelivery handles one RabbitMQ delivery from a consumer with manual
// acks (autoAck false), keyed by its MessageId, and settles it after Do
// returns: Ack, Nack with requeue (Retry) or Reject without requeue
// (Discard). The returned error is the settling error; the Result says what
// happened to the effect.
//
// If the process dies, or the channel closes, before the ack reaches the
// broker, RabbitMQ redelivers the message (Redelivered set) and Do answers
// it from the stored result without applying the effect again.
func (c *Consumer) HandleDelivery(ctx context.Context, d amqp.Delivery) (Result, error) {
	r := c.Handle(ctx, d.MessageId, d.Body)
	var err error
	switch r.Action {
	case Ack:
		err = d.Ack(false)
	case Retry:
		// Requeued at the head of the queue at once. A production consumer
		// usually delays this (a dead-letter exchange to a queue with a
		// message TTL) so a store outage does not spin.
		err = d.Nack(false, true)
	default:
		err = d.Reject(false)
	}
	if r.Err != nil || err != nil {
		c.log(ctx, d.MessageId, r, err, "consumer_tag", d.ConsumerTag, "routing_key", d.RoutingKey, "delivery_tag", d.DeliveryTag, "redelivered", d.Redelivered)
	}
	return r, err
}

// ConsumeAMQP handles deliveries one at a time with [Consumer.HandleDelivery]
// until ctx ends (it returns ctx's error) or the delivery channel closes
// (nil: the channel or connection was closed; reconnect and consume again).
// Get deliveries from (*amqp.Channel).Consume with autoAck false, after
// setting a prefetch with Qos.
func (c *Consumer) ConsumeAMQP(ctx context.Context, deliveries <-chan amqp.Delivery) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case d, ok := <-deliveries:
			if !ok {
				return nil
			}
			// A settle error means the channel is gone; the closed
			// delivery channel ends the loop next.
			_, _ = c.HandleDelivery(ctx, d)
		}
	}
}
