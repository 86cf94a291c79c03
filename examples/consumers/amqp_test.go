package consumers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retrysafe/retrysafe/examples/consumers"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

func amqpURL() string { return env("RETRYSAFE_AMQP_URL", defaultAMQPURL) }

// dialAMQP opens a connection, closed when the test ends.
func dialAMQP(t *testing.T) *amqp.Connection {
	t.Helper()
	conn, err := amqp.DialConfig(amqpURL(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// declareQueue declares a queue of the test's own and deletes it when the
// test ends. It is not auto-delete: the crash tests leave it without
// consumers for a moment, and it must keep the unacked message. x-expires
// removes it anyway if the cleanup never runs.
func declareQueue(t *testing.T) string {
	t.Helper()
	conn := dialAMQP(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	name := randomName("retrysafe-consumers-")
	if _, err := ch.QueueDeclare(name, false, false, false, false, amqp.Table{"x-expires": int32(10 * 60 * 1000)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := ch.QueueDelete(name, false, false, false); err != nil {
			t.Errorf("deleting queue %s: %v", name, err)
		}
	})
	return name
}

// publishAMQP publishes the test transfer with the message id id; every
// call is a separate publish (RabbitMQ does not deduplicate).
func publishAMQP(t *testing.T, conn *amqp.Connection, queue, id string) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp.Publishing{
		MessageId:    id,
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Body:         transferBody,
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conf.WaitContext(ctx); err != nil || !ok {
		t.Fatalf("publish not confirmed: ok=%v err=%v", ok, err)
	}
}

// amqpHandled is one delivery a test consumer handled.
type amqpHandled struct {
	redelivered bool
	result      consumers.Result
	settleErr   error
}

// deliveriesOf starts consuming queue on a new channel of conn with manual
// acks and prefetch 1, and returns the delivery channel.
func deliveriesOf(t *testing.T, conn *amqp.Connection, queue string) <-chan amqp.Delivery {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// consumeAMQP handles queue's deliveries on conn with c.HandleDelivery,
// reporting each one. received, if not nil, is signalled as each delivery
// arrives, before it is handled.
func consumeAMQP(t *testing.T, conn *amqp.Connection, queue string, c *consumers.Consumer, received chan<- struct{}) <-chan amqpHandled {
	t.Helper()
	ds := deliveriesOf(t, conn, queue)
	out := make(chan amqpHandled, 16)
	ctx := t.Context()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case d, ok := <-ds:
				if !ok {
					return
				}
				if received != nil {
					received <- struct{}{}
				}
				r, err := c.HandleDelivery(ctx, d)
				out <- amqpHandled{redelivered: d.Redelivered, result: r, settleErr: err}
			}
		}
	}()
	return out
}

func checkAcked(t *testing.T, h amqpHandled, want consumers.Receipt) {
	t.Helper()
	if h.result.Action != consumers.Ack || h.result.Err != nil || h.settleErr != nil {
		t.Fatalf("delivery (redelivered=%v): action %v, err %v, settle err %v; want a clean ack", h.redelivered, h.result.Action, h.result.Err, h.settleErr)
	}
	if want != (consumers.Receipt{}) && h.result.Receipt != want {
		t.Errorf("receipt %+v, want the first one %+v (replayed)", h.result.Receipt, want)
	}
}

// The publisher sends the same message (same MessageId) twice: the second
// delivery replays the first one's receipt.
func TestAMQPDuplicatePublish(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, w *world) {
		conn := dialAMQP(t)
		q := declareQueue(t)
		id := randomName("msg-")
		publishAMQP(t, conn, q, id)
		publishAMQP(t, conn, q, id)

		events := consumeAMQP(t, conn, q, w.consumer(nil), nil)
		first := await(t, events, "first delivery")
		checkAcked(t, first, consumers.Receipt{})
		second := await(t, events, "second delivery")
		checkAcked(t, second, first.result.Receipt)
		w.assertOnce(t, id)
	})
}

// The consumer applies the effect (Do completes) and dies before its ack
// reaches RabbitMQ: the broker redelivers the message to the next consumer,
// and Do replays the stored receipt.
func TestAMQPCrashBeforeAck(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, w *world) {
		q := declareQueue(t)
		id := randomName("msg-")
		publishAMQP(t, dialAMQP(t), q, id)

		// Consumer 1: handle the message, then "crash": its connection
		// goes away without the ack.
		conn1 := dialAMQP(t)
		d := await(t, deliveriesOf(t, conn1, q), "first delivery")
		if d.Redelivered {
			t.Fatal("first delivery is marked redelivered")
		}
		first := w.consumer(nil).Handle(t.Context(), d.MessageId, d.Body)
		if first.Action != consumers.Ack || first.Err != nil {
			t.Fatalf("first delivery: %v, %v", first.Action, first.Err)
		}
		if err := conn1.Close(); err != nil {
			t.Fatal(err)
		}

		// Consumer 2 gets the redelivery.
		second := await(t, consumeAMQP(t, dialAMQP(t), q, w.consumer(nil), nil), "redelivery")
		if !second.redelivered {
			t.Error("second delivery is not marked redelivered")
		}
		checkAcked(t, second, first.Receipt)
		w.assertOnce(t, id)
	})
}

// The first delivery fails transiently: Do releases the key, the consumer
// nacks with requeue, and the redelivery applies the effect once.
func TestAMQPTransientFailure(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, w *world) {
		conn := dialAMQP(t)
		q := declareQueue(t)
		id := randomName("msg-")
		publishAMQP(t, conn, q, id)

		events := consumeAMQP(t, conn, q, w.consumer(failFirst(w.ledger.Credit)), nil)
		first := await(t, events, "first delivery")
		if first.result.Action != consumers.Retry || first.result.Err == nil || first.settleErr != nil {
			t.Fatalf("first delivery: action %v, err %v, settle err %v; want a nacked retry", first.result.Action, first.result.Err, first.settleErr)
		}
		second := await(t, events, "redelivery")
		if !second.redelivered {
			t.Error("second delivery is not marked redelivered")
		}
		checkAcked(t, second, consumers.Receipt{})
		w.assertOnce(t, id)
	})
}

// Consumer A loses its connection while it is applying the effect:
// RabbitMQ requeues the unacked message and delivers it to consumer B,
// which reaches Do while A is still working. B waits for A's result and
// replays it; the effect happens once. (A's own ack fails: its channel is
// gone.)
func TestAMQPConcurrentRedelivery(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, w *world) {
		q := declareQueue(t)
		id := randomName("msg-")
		publishAMQP(t, dialAMQP(t), q, id)

		connA, connB := dialAMQP(t), dialAMQP(t)
		watch := watchClaims(w.store)
		consumerB := w.consumer(nil)
		consumerB.Do.Store = watch
		bReceived := make(chan struct{}, 1)
		var eventsB <-chan amqpHandled
		startB := make(chan struct{})

		applyA := func(ctx context.Context, msgID string, tr consumers.Transfer) (consumers.Receipt, error) {
			close(startB) // the test goroutine starts B now
			// A's connection drops while A works; RabbitMQ requeues.
			_ = connA.Close()
			for _, step := range []struct {
				ch   <-chan struct{}
				what string
			}{{bReceived, "B's delivery"}, {watch.claimed, "B's claim"}} {
				select {
				case <-step.ch:
				case <-time.After(waitFor):
					return consumers.Receipt{}, errors.New("timed out waiting for " + step.what)
				}
			}
			// B is in Do now, finding A's record processing.
			return w.ledger.Credit(ctx, msgID, tr)
		}
		eventsA := consumeAMQP(t, connA, q, w.consumer(applyA), nil)
		await(t, startB, "A to start applying")
		eventsB = consumeAMQP(t, connB, q, consumerB, bReceived)

		a := await(t, eventsA, "A's result")
		if a.result.Action != consumers.Ack || a.result.Err != nil {
			t.Fatalf("A: action %v, err %v", a.result.Action, a.result.Err)
		}
		if a.settleErr == nil {
			t.Error("A's ack succeeded on a closed connection")
		}
		b := await(t, eventsB, "B's result")
		if !b.redelivered {
			t.Error("B's delivery is not marked redelivered")
		}
		checkAcked(t, b, a.result.Receipt)
		w.assertOnce(t, id)
	})
}
