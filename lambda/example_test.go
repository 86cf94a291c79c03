package retrysafelambda_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/retrysafe/retrysafe"
	retrysafelambda "github.com/retrysafe/retrysafe/lambda"
	"github.com/retrysafe/retrysafe/store/memory"
)

type Payment struct {
	PaymentID string `json:"paymentId"`
	Amount    int    `json:"amount"`
	SentAt    string `json:"sentAt"`
}

type Receipt struct {
	Charge string `json:"charge"`
}

// A direct invocation (the Invoke API, EventBridge, Step Functions): the
// key is the event's paymentId, and the fingerprint covers its amount, so
// a retry with a new sentAt replays and a new amount fails. In a function,
// pass the result to lambda.Start, and use a shared store (store/dynamodb,
// store/postgres, store/redis) instead of the memory store.
func ExampleFunc() {
	store := memory.New(memory.Config{})
	defer store.Close()
	charges := 0
	handler, err := retrysafelambda.Func(retrysafelambda.Config{
		Store:    store,
		Scope:    "charge-function",
		Key:      "/paymentId",
		Validate: []string{"/amount"},
	}, func(ctx context.Context, p Payment) (Receipt, error) {
		charges++
		return Receipt{Charge: fmt.Sprintf("ch_%d", charges)}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// lambda.Start(handler)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // Lambda's deadline
	defer cancel()
	first, _ := handler(ctx, json.RawMessage(`{"paymentId":"p-1","amount":100,"sentAt":"10:00"}`))
	retry, _ := handler(ctx, json.RawMessage(`{"paymentId":"p-1","amount":100,"sentAt":"10:01"}`))
	_, err = handler(ctx, json.RawMessage(`{"paymentId":"p-1","amount":999}`))
	fmt.Println(first.Charge, retry.Charge, charges)
	fmt.Println(err)
	// Output:
	// ch_1 ch_1 1
	// retrysafe: idempotency key reused with a different request
}

// An SQS batch: each message on its own, keyed by its messageId; a
// message delivered twice runs once, and failures are reported so that
// SQS redelivers only them (ReportBatchItemFailures).
func ExampleSQS() {
	store := memory.New(memory.Config{})
	defer store.Close()
	handler, err := retrysafelambda.SQS(retrysafelambda.Config{Store: store, Scope: "orders-consumer"},
		func(ctx context.Context, m events.SQSMessage) error {
			if m.Body == "bad" {
				return fmt.Errorf("cannot ship %s", m.MessageId)
			}
			fmt.Println("shipping", m.MessageId)
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	batch := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m-1", Body: "ok"}, {MessageId: "m-2", Body: "bad"}, {MessageId: "m-1", Body: "ok"},
	}}
	resp, _ := handler(context.Background(), batch)
	fmt.Println("failed:", resp.BatchItemFailures)
	// Output:
	// shipping m-1
	// failed: [{m-2}]
}

// A Go worker outside Lambda (a queue consumer, a cron job) needs no
// wrapper: retrysafe.Do runs a function at most once per key on any
// store. With DynamoDB (store/dynamodb) the worker and the Lambda
// functions can share one table.
func Example_worker() {
	store := memory.New(memory.Config{})
	defer store.Close()
	ctx := context.Background()
	sent := 0
	for range 2 { // the same job, taken off the queue twice
		id, err := retrysafe.Do(ctx, store, "invoice-42", "", func(ctx context.Context) (string, error) {
			sent++
			return "mail-1", nil
		})
		fmt.Println(id, err)
	}
	fmt.Println("sent", sent)
	// Output:
	// mail-1 <nil>
	// mail-1 <nil>
	// sent 1
}
