package retrysafelambda

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
)

// TestThroughLambdaRuntime invokes the wrapped handlers through
// aws-lambda-go's own handler (lambda.NewHandler, what lambda.Start runs):
// their signatures are accepted, and the payloads in and out are the
// runtime's JSON.
func TestThroughLambdaRuntime(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var runs atomic.Int64

	fn, err := Func(Config{Store: newCounting(t), Key: "/orderId"}, func(ctx context.Context, o order) (receipt, error) {
		return receipt{Charge: "ch_" + o.OrderID, Run: runs.Add(1)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		out, err := lambda.NewHandler(fn).Invoke(ctx, []byte(`{"orderId":"r1","amount":3}`))
		if err != nil || string(out) != `{"charge":"ch_r1","run":1}` {
			t.Fatalf("Func through the runtime: %s, %v", out, err)
		}
	}

	sqs, err := SQS(Config{Store: newCounting(t)}, func(ctx context.Context, m events.SQSMessage) error {
		runs.Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	batch := []byte(`{"Records":[{"messageId":"a","body":"{}","eventSource":"aws:sqs"},{"messageId":"a","body":"{}","eventSource":"aws:sqs"}]}`)
	before := runs.Load()
	out, err := lambda.NewHandler(sqs).Invoke(ctx, batch)
	if err != nil || string(out) != `{"batchItemFailures":null}` || runs.Load() != before+1 {
		t.Fatalf("SQS through the runtime: %s, %v, %d runs", out, err, runs.Load()-before)
	}

	api, err := APIGateway(Config{Store: newCounting(t)}, func(ctx context.Context, r events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		return events.APIGatewayProxyResponse{StatusCode: 201, Body: `{"id":1}`}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	req := []byte(`{"httpMethod":"POST","path":"/p","headers":{"Idempotency-Key":"k"},"body":"{}"}`)
	lambda.NewHandler(api).Invoke(ctx, req)
	out, err = lambda.NewHandler(api).Invoke(ctx, req)
	var resp events.APIGatewayProxyResponse
	if err != nil || json.Unmarshal(out, &resp) != nil || resp.StatusCode != 201 || resp.Headers["Idempotent-Replayed"] != "true" {
		t.Fatalf("APIGateway replay through the runtime: %s, %v", out, err)
	}
	if !strings.Contains(string(out), `"body":"{\"id\":1}"`) {
		t.Fatalf("replayed body: %s", out)
	}
}
