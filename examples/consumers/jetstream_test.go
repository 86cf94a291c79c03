package consumers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/retrysafe/retrysafe/examples/consumers"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

func natsURL() string { return env("RETRYSAFE_NATS_URL", defaultNATSURL) }

// ackWait is the test consumers' AckWait: a message not acknowledged
// within it is redelivered.
const ackWait = time.Second

// jsStream is a stream of the test's own, deleted when the test ends.
type jsStream struct {
	js      jetstream.JetStream
	name    string
	subject string
}

// newStream creates a memory stream with the given duplicates window
// (0: the server's default, two minutes).
func newStream(t *testing.T, duplicates time.Duration) *jsStream {
	t.Helper()
	nc, err := nats.Connect(natsURL(), nats.Timeout(5*time.Second))
	if err != nil {
		testenv.Unreachable(t, "NATS", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s := &jsStream{js: js, name: randomName("RETRYSAFE_CONSUMERS_")}
	s.subject = s.name + ".transfers"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       s.name,
		Subjects:   []string{s.subject},
		Storage:    jetstream.MemoryStorage,
		MaxAge:     10 * time.Minute, // gone even if the cleanup never runs
		Duplicates: duplicates,
	}); err != nil {
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
			testenv.Unreachable(t, "NATS JetStream", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, s.name); err != nil {
			t.Errorf("deleting stream %s: %v", s.name, err)
		}
	})
	return s
}

// consumer returns the stream's durable pull consumer "transfers" with
// explicit acks and a short AckWait; every call returns a handle on the
// same consumer, as separate processes would have.
func (s *jsStream) consumer(t *testing.T) jetstream.Consumer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := s.js.CreateOrUpdateConsumer(ctx, s.name, jetstream.ConsumerConfig{
		Durable:    "transfers",
		AckPolicy:  jetstream.AckExplicitPolicy,
		AckWait:    ackWait,
		MaxDeliver: 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// publish publishes the test transfer with Nats-Msg-Id msgID and reports
// whether the stream dropped it as a duplicate.
func (s *jsStream) publish(t *testing.T, msgID string) (duplicate bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := s.js.Publish(ctx, s.subject, transferBody, jetstream.WithMsgID(msgID))
	if err != nil {
		t.Fatal(err)
	}
	return ack.Duplicate
}

// next fetches one message; called from the test goroutine only.
func next(t *testing.T, c jetstream.Consumer) jetstream.Msg {
	t.Helper()
	msg, err := c.Next(jetstream.FetchMaxWait(waitFor))
	if err != nil {
		t.Fatalf("fetching a message: %v", err)
	}
	return msg
}

func numDelivered(t *testing.T, msg jetstream.Msg) uint64 {
	t.Helper()
	md, err := msg.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return md.NumDelivered
}

// handleJS handles msg with c.HandleMsg and requires a clean ack; want,
// if not zero, is the receipt the replay must return.
func handleJS(t *testing.T, c *consumers.Consumer, msg jetstream.Msg, want consumers.Receipt) consumers.Result {
	t.Helper()
	r, err := c.HandleMsg(t.Context(), msg)
	if r.Action != consumers.Ack || r.Err != nil || err != nil {
		t.Fatalf("delivery %d: action %v, err %v, settle err %v; want a clean ack", numDelivered(t, msg), r.Action, r.Err, err)
	}
	if want != (consumers.Receipt{}) && r.Receipt != want {
		t.Errorf("receipt %+v, want the first one %+v (replayed)", r.Receipt, want)
	}
	return r
}

// The publisher sends the same message twice with the same Nats-Msg-Id.
// JetStream drops a repeat inside the stream's duplicates window (PubAck
// Duplicate), so to see the duplicate at all the stream here has a 100ms
// window and the second publish comes after it: what happens in production
// when a publisher retries later than the window (default two minutes), or
// replays an outbox. Do keys by the same Nats-Msg-Id and replays.
func TestJetStreamDuplicatePublish(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, w *world) {
		s := newStream(t, 100*time.Millisecond)
		id := randomName("msg-")
		if s.publish(t, id) {
			t.Fatal("first publish reported as a duplicate")
		}
		time.Sleep(300 * time.Millisecond) // let the window pass
		if s.publish(t, id) {
			t.Fatal("a re-publish after the duplicates window was dropped")
		}

		cons, c := s.consumer(t), w.consumer(nil)
		first := handleJS(t, c, next(t, cons), consumers.Receipt{})
		handleJS(t, c, next(t, cons), first.Receipt)
		w.assertOnce(t, id)
	})
}

// The consumer applies the effect (Do completes) and dies before acking:
// after AckWait JetStream redelivers, and Do replays the stored receipt.
func TestJetStreamCrashBeforeAck(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, w *world) {
		s := newStream(t, 0)
		id := randomName("msg-")
		s.publish(t, id)

		cons := s.consumer(t)
		msg := next(t, cons)
		first := w.consumer(nil).Handle(t.Context(), id, msg.Data())
		if first.Action != consumers.Ack || first.Err != nil {
			t.Fatalf("first delivery: %v, %v", first.Action, first.Err)
		}
		// Crash: no ack. The next consumer process fetches again.
		redelivery := next(t, s.consumer(t))
		if n := numDelivered(t, redelivery); n < 2 {
			t.Errorf("redelivery has NumDelivered %d, want >= 2", n)
		}
		handleJS(t, w.consumer(nil), redelivery, first.Receipt)
		w.assertOnce(t, id)
	})
}

// The first delivery fails transiently: Do releases the key, the consumer
// Naks, and the redelivery applies the effect once.
func TestJetStreamTransientFailure(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, w *world) {
		s := newStream(t, 0)
		id := randomName("msg-")
		s.publish(t, id)

		cons, c := s.consumer(t), w.consumer(failFirst(w.ledger.Credit))
		r, err := c.HandleMsg(t.Context(), next(t, cons))
		if r.Action != consumers.Retry || r.Err == nil || err != nil {
			t.Fatalf("first delivery: action %v, err %v, settle err %v; want a Nak'ed retry", r.Action, r.Err, err)
		}
		redelivery := next(t, cons)
		if n := numDelivered(t, redelivery); n != 2 {
			t.Errorf("redelivery has NumDelivered %d, want 2", n)
		}
		handleJS(t, c, redelivery, consumers.Receipt{})
		w.assertOnce(t, id)
	})
}

// Subscriber A takes longer than AckWait to apply the effect, so JetStream
// redelivers the message to subscriber B while A is still working. B
// reaches Do, finds A's record processing, waits for A's result and
// replays it; the effect happens once and both acks succeed.
func TestJetStreamConcurrentRedelivery(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, w *world) {
		s := newStream(t, 0)
		id := randomName("msg-")
		s.publish(t, id)

		watch := watchClaims(w.store)
		consumerB := w.consumer(nil)
		consumerB.Do.Store = watch
		type handled struct {
			delivered uint64
			result    consumers.Result
			settleErr error
		}
		bDone := make(chan handled, 1)
		bReceived := make(chan uint64, 1)
		consB := s.consumer(t)
		startB := func() {
			go func() {
				msg, err := consB.Next(jetstream.FetchMaxWait(waitFor))
				if err != nil {
					bDone <- handled{settleErr: err}
					return
				}
				md, _ := msg.Metadata()
				bReceived <- md.NumDelivered
				r, err := consumerB.HandleMsg(t.Context(), msg)
				bDone <- handled{delivered: md.NumDelivered, result: r, settleErr: err}
			}()
		}

		applyA := func(ctx context.Context, msgID string, tr consumers.Transfer) (consumers.Receipt, error) {
			// A is slow (and sends no InProgress): B fetches the
			// redelivery once AckWait has passed.
			startB()
			select {
			case <-bReceived:
			case <-time.After(waitFor):
				return consumers.Receipt{}, errors.New("timed out waiting for B's delivery")
			}
			select {
			case <-watch.claimed:
			case <-time.After(waitFor):
				return consumers.Receipt{}, errors.New("timed out waiting for B's claim")
			}
			// B is in Do now, finding A's record processing.
			return w.ledger.Credit(ctx, msgID, tr)
		}
		a := handleJS(t, w.consumer(applyA), next(t, s.consumer(t)), consumers.Receipt{})
		b := await(t, bDone, "B's result")
		if b.delivered < 2 {
			t.Errorf("B's delivery has NumDelivered %d, want >= 2", b.delivered)
		}
		if b.result.Action != consumers.Ack || b.result.Err != nil || b.settleErr != nil {
			t.Fatalf("B: action %v, err %v, settle err %v; want a clean ack", b.result.Action, b.result.Err, b.settleErr)
		}
		if b.result.Receipt != a.Receipt {
			t.Errorf("B's receipt %+v, want A's %+v", b.result.Receipt, a.Receipt)
		}
		w.assertOnce(t, id)
	})
}
