package retrysafelambda

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// TestStoreOutage: a store that cannot claim runs nothing (an error for
// direct invocations and SQS messages, 503 for API Gateway); a result
// that ran but could not be stored is still the answer, so that Lambda
// does not retry an effect that happened.
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := &failingStore{Store: testenv.Memory(t)}
	var runs atomic.Int64
	h, err := Func(Config{Store: store, Key: "/orderId"}, func(ctx context.Context, o order) (receipt, error) {
		return receipt{Run: runs.Add(1)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	store.claim.Store(true)
	if _, err := h(ctx, event(t, order{OrderID: "x"})); !errors.Is(err, retrysafe.ErrStoreUnavailable) || runs.Load() != 0 {
		t.Fatalf("claim outage: %v, %d runs; want ErrStoreUnavailable and nothing run", err, runs.Load())
	}
	sqs, err := SQS(Config{Store: store}, func(ctx context.Context, m events.SQSMessage) error { runs.Add(1); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := sqs(ctx, events.SQSEvent{Records: []events.SQSMessage{sqsMsg("m", "{}")}}); len(resp.BatchItemFailures) != 1 || runs.Load() != 0 {
		t.Fatalf("claim outage on SQS: %+v, %d runs", resp, runs.Load())
	}
	api, err := APIGateway(Config{Store: store}, func(ctx context.Context, r events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		runs.Add(1)
		return events.APIGatewayProxyResponse{StatusCode: 201}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := api(ctx, restRequest("POST", "k", "{}")); r.StatusCode != http.StatusServiceUnavailable || problemType(t, r) != retrysafe.ProblemStoreUnavailable || runs.Load() != 0 {
		t.Fatalf("claim outage on API Gateway: %+v, %d runs", r, runs.Load())
	}

	store.claim.Store(false)
	store.complete.Store(true)
	if got, err := h(ctx, event(t, order{OrderID: "y"})); err != nil || got.Run != 1 {
		t.Fatalf("result not stored: %+v, %v; want the result and no error", got, err)
	}
	if r, err := api(ctx, restRequest("POST", "k2", "{}")); err != nil || r.StatusCode != 201 {
		t.Fatalf("API Gateway response not stored: %+v, %v; want the handler's response", r, err)
	}
}
