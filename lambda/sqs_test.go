package retrysafelambda

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/retrysafe/retrysafe"
)

func sqsMsg(id, body string) events.SQSMessage {
	return events.SQSMessage{MessageId: id, Body: body, EventSourceARN: "arn:aws:sqs:eu-west-1:123456789012:orders"}
}

func failedIDs(resp events.SQSEventResponse) []string {
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

// TestSQSDuplicates: one batch holding a message twice (one messageId)
// and two messages with one key in the body, then a second batch that
// redelivers them: every key's effect happens once, and nothing fails.
func TestSQSDuplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("messageId", func(t *testing.T) {
		t.Parallel()
		effects := map[string]int{}
		h, err := SQS(Config{Store: newCounting(t), Scope: "orders"}, func(ctx context.Context, m events.SQSMessage) error {
			effects[m.MessageId]++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		batch := events.SQSEvent{Records: []events.SQSMessage{sqsMsg("m1", `{"n":1}`), sqsMsg("m2", `{"n":2}`), sqsMsg("m1", `{"n":1}`)}}
		for i := range 2 {
			resp, err := h(ctx, batch)
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("batch %d: failures %v, err %v", i, failedIDs(resp), err)
			}
		}
		if effects["m1"] != 1 || effects["m2"] != 1 {
			t.Fatalf("effects %v, want each message once", effects)
		}
	})
	t.Run("body key", func(t *testing.T) {
		t.Parallel()
		var effects atomic.Int64
		h, err := SQS(Config{Store: newCounting(t), Key: "/orderId", Validate: []string{"/orderId", "/amount"}}, func(ctx context.Context, m events.SQSMessage) error {
			effects.Add(1)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The producer sent order 7 twice (two messageIds, two sentAt).
		first := events.SQSEvent{Records: []events.SQSMessage{
			sqsMsg("a", `{"orderId":"7","amount":10,"sentAt":"1"}`),
			sqsMsg("b", `{"orderId":"7","amount":10,"sentAt":"2"}`),
			sqsMsg("c", `{"orderId":"8","amount":3}`),
		}}
		second := events.SQSEvent{Records: []events.SQSMessage{
			sqsMsg("d", `{"orderId":"8","amount":3}`),
			sqsMsg("e", `{"orderId":"7","amount":99}`), // key reused with another amount
			sqsMsg("f", `not json`),
		}}
		if resp, _ := h(ctx, first); len(resp.BatchItemFailures) != 0 {
			t.Fatalf("first batch failures %v", failedIDs(resp))
		}
		resp, _ := h(ctx, second)
		if got := failedIDs(resp); !slices.Equal(got, []string{"e", "f"}) {
			t.Fatalf("second batch failures %v, want [e f] (a mismatch, a body without the key)", got)
		}
		if effects.Load() != 2 {
			t.Fatalf("%d effects, want 2 (orders 7 and 8)", effects.Load())
		}
	})
}

// TestSQSConcurrentBatches: two invocations handle batches that share
// messages at the same time (SQS delivered them twice to two
// environments): each message's effect happens once, and the duplicate
// waits for the original's result instead of failing.
func TestSQSConcurrentBatches(t *testing.T) {
	t.Parallel()
	store := newCounting(t)
	var mu sync.Mutex
	effects := map[string]int{}
	h, err := SQS(Config{Store: store, WaitTimeout: 20 * time.Second}, func(ctx context.Context, m events.SQSMessage) error {
		mu.Lock()
		effects[m.MessageId]++
		mu.Unlock()
		// Hold each message until both batches have claimed it.
		for store.claimsOf(m.MessageId) < 2 {
			time.Sleep(time.Millisecond)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	var records []events.SQSMessage
	for i := range 5 {
		id := fmt.Sprintf("m%d", i)
		ids = append(ids, id)
		records = append(records, sqsMsg(id, "{}"))
	}
	var wg sync.WaitGroup
	resps := make([]events.SQSEventResponse, 2)
	for i := range 2 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resps[i], _ = h(ctx, events.SQSEvent{Records: records})
		})
	}
	wg.Wait()
	for i, r := range resps {
		if len(r.BatchItemFailures) != 0 {
			t.Errorf("batch %d failures %v", i, failedIDs(r))
		}
	}
	for _, id := range ids {
		if effects[id] != 1 {
			t.Errorf("message %s ran %d times", id, effects[id])
		}
	}
}

// TestSQSFailures: a failed message is reported and its key released, so
// that its redelivery runs it; a permanent failure is stored and replayed
// (reported each time, until the redrive policy moves it aside); a FIFO
// batch stops at its first failure.
func TestSQSFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	errFlaky := errors.New("flaky")
	errPoison := errors.New("poison")
	var runs sync.Map
	count := func(id string) int64 {
		v, _ := runs.LoadOrStore(id, new(atomic.Int64))
		return v.(*atomic.Int64).Load()
	}
	flakyOnce := atomic.Bool{}
	h, err := SQS(Config{Store: newCounting(t)}, func(ctx context.Context, m events.SQSMessage) error {
		v, _ := runs.LoadOrStore(m.MessageId, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		switch m.Body {
		case "flaky":
			if flakyOnce.CompareAndSwap(false, true) {
				return errFlaky
			}
		case "poison":
			return retrysafe.Permanent(errPoison)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	batch := events.SQSEvent{Records: []events.SQSMessage{sqsMsg("ok", "fine"), sqsMsg("fl", "flaky"), sqsMsg("po", "poison")}}
	resp, _ := h(ctx, batch)
	if got := failedIDs(resp); !slices.Equal(got, []string{"fl", "po"}) {
		t.Fatalf("first delivery failures %v, want [fl po]", got)
	}
	resp, _ = h(ctx, batch)
	if got := failedIDs(resp); !slices.Equal(got, []string{"po"}) {
		t.Fatalf("redelivery failures %v, want [po]", got)
	}
	if count("ok") != 1 || count("fl") != 2 || count("po") != 1 {
		t.Fatalf("runs ok=%d fl=%d po=%d, want 1, 2, 1", count("ok"), count("fl"), count("po"))
	}

	fifo := func(id, body string) events.SQSMessage {
		m := sqsMsg(id, body)
		m.EventSourceARN = "arn:aws:sqs:eu-west-1:123456789012:orders.fifo"
		return m
	}
	var fifoRuns []string
	hf, err := SQS(Config{Store: newCounting(t)}, func(ctx context.Context, m events.SQSMessage) error {
		fifoRuns = append(fifoRuns, m.MessageId)
		if m.Body == "bad" {
			return errFlaky
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, _ = hf(ctx, events.SQSEvent{Records: []events.SQSMessage{fifo("1", "x"), fifo("2", "bad"), fifo("3", "x"), fifo("4", "x")}})
	if got := failedIDs(resp); !slices.Equal(got, []string{"2", "3", "4"}) {
		t.Fatalf("FIFO failures %v, want [2 3 4]", got)
	}
	if !slices.Equal(fifoRuns, []string{"1", "2"}) {
		t.Fatalf("FIFO ran %v, want [1 2]", fifoRuns)
	}
}

// TestSQSDeadline: messages left when the batch's deadline has passed are
// reported failed without running, and leave no record behind.
func TestSQSDeadline(t *testing.T) {
	t.Parallel()
	store := newCounting(t)
	var ran []string
	h, err := SQS(Config{Store: store}, func(ctx context.Context, m events.SQSMessage) error {
		ran = append(ran, m.MessageId)
		<-ctx.Done() // the first message uses up the invocation
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	resp, _ := h(ctx, events.SQSEvent{Records: []events.SQSMessage{sqsMsg("1", "{}"), sqsMsg("2", "{}")}})
	if got := failedIDs(resp); !slices.Equal(got, []string{"2"}) || !slices.Equal(ran, []string{"1"}) {
		t.Fatalf("failures %v, ran %v; want [2] and [1]", got, ran)
	}
	if rec := record(t, store, "", "2"); rec != nil {
		t.Fatalf("message 2 left a record: %+v", rec)
	}
	if rec := record(t, store, "", "1"); rec == nil || rec.State != retrysafe.StateCompleted {
		t.Fatalf("message 1 (returned nil after the deadline) has record %+v, want completed", rec)
	}
}
