package retrysafelambda

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/retrysafe/retrysafe"
)

func restRequest(method, key, body string) events.APIGatewayProxyRequest {
	h := map[string]string{"Authorization": "Bearer alice", "Content-Type": "application/json"}
	if key != "" {
		h["idempotency-key"] = key
	}
	return events.APIGatewayProxyRequest{HTTPMethod: method, Path: "/payments", Resource: "/payments", Headers: h, Body: body}
}

func problemType(t *testing.T, resp events.APIGatewayProxyResponse) string {
	t.Helper()
	if resp.Headers["Content-Type"] != retrysafe.ContentTypeProblem {
		t.Fatalf("status %d with Content-Type %q, want a problem", resp.StatusCode, resp.Headers["Content-Type"])
	}
	var p retrysafe.Problem
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(p.Type, retrysafe.DefaultProblemBase)
}

// TestAPIGatewayConcurrentDuplicates: overlapping POSTs with one
// Idempotency-Key charge once; every duplicate gets the stored response
// with Idempotent-Replayed: true.
func TestAPIGatewayConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	const n = 20
	store := newCounting(t)
	var charges atomic.Int64
	h, err := APIGateway(Config{Store: store, WaitTimeout: 20 * time.Second}, func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		c := charges.Add(1)
		for store.claims.Load() < n {
			time.Sleep(time.Millisecond)
		}
		return events.APIGatewayProxyResponse{StatusCode: http.StatusCreated, Headers: map[string]string{"Content-Type": "application/json"},
			Body: fmt.Sprintf(`{"charge":%d}`, c)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	resps := make([]events.APIGatewayProxyResponse, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resps[i], errs[i] = h(ctx, restRequest("POST", "k-1", `{"amount":100}`))
		})
	}
	close(start)
	wg.Wait()
	if charges.Load() != 1 {
		t.Fatalf("%d charges, want 1", charges.Load())
	}
	replays := 0
	for i, r := range resps {
		if errs[i] != nil || r.StatusCode != http.StatusCreated || r.Body != `{"charge":1}` {
			t.Fatalf("response %d: %+v, %v", i, r, errs[i])
		}
		if r.Headers[retrysafe.HeaderReplayed] == "true" {
			replays++
		}
	}
	if replays != n-1 {
		t.Fatalf("%d replays, want %d", replays, n-1)
	}
}

// TestAPIGatewayAnswers: the middleware's answers for mismatch, missing
// and invalid keys, unprotected methods, in-flight conflicts, and scopes.
func TestAPIGatewayAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var runs atomic.Int64
	hold := make(chan struct{})
	fn := func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		n := runs.Add(1)
		if req.Body == "slow" {
			<-hold
		}
		return events.APIGatewayProxyResponse{StatusCode: 200, Body: fmt.Sprint(n)}, nil
	}
	h, err := APIGateway(Config{Store: newCounting(t), InFlight: retrysafe.InFlightConflict}, fn)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := h(ctx, restRequest("POST", "a", `{"amount":1}`))
	if first.Body != "1" || first.Headers[retrysafe.HeaderReplayed] != "" {
		t.Fatalf("first response %+v", first)
	}
	// Another body, the same key: 422. Another caller, the same key: its own record.
	if r, _ := h(ctx, restRequest("POST", "a", `{"amount":2}`)); r.StatusCode != 422 || problemType(t, r) != retrysafe.ProblemMismatch {
		t.Fatalf("mismatch: %+v", r)
	}
	bob := restRequest("POST", "a", `{"amount":1}`)
	bob.Headers["Authorization"] = "Bearer bob"
	if r, _ := h(ctx, bob); r.Body != "2" || r.Headers[retrysafe.HeaderReplayed] != "" {
		t.Fatalf("another caller with the same key: %+v, want its own run", r)
	}
	// The key as a Structured-Field string is the same key; in any header case.
	quoted := restRequest("POST", "", `{ "amount": 1 }`)
	quoted.Headers["IDEMPOTENCY-KEY"] = `"a"`
	if r, _ := h(ctx, quoted); r.Body != "1" || r.Headers[retrysafe.HeaderReplayed] != "true" {
		t.Fatalf("quoted key, reformatted body: %+v, want the replay", r)
	}
	if r, _ := h(ctx, restRequest("POST", "a,b", `{}`)); r.StatusCode != 400 || problemType(t, r) != retrysafe.ProblemInvalidKey {
		t.Fatalf("invalid key: %+v", r)
	}
	before := runs.Load()
	for _, req := range []events.APIGatewayProxyRequest{restRequest("GET", "a", ""), restRequest("POST", "", `{}`)} {
		if r, _ := h(ctx, req); r.StatusCode != 200 {
			t.Fatalf("unprotected %s: %+v", req.HTTPMethod, r)
		}
	}
	if runs.Load() != before+2 {
		t.Fatal("unprotected requests did not run")
	}

	done := make(chan events.APIGatewayProxyResponse)
	go func() {
		r, _ := h(ctx, restRequest("POST", "slow", "slow"))
		done <- r
	}()
	for runs.Load() == before+2 {
		time.Sleep(time.Millisecond)
	}
	r, _ := h(ctx, restRequest("POST", "slow", "slow"))
	if r.StatusCode != 409 || problemType(t, r) != retrysafe.ProblemInProgress || r.Headers["Retry-After"] == "" {
		t.Fatalf("duplicate in flight: %+v", r)
	}
	close(hold)
	if r := <-done; r.StatusCode != 200 {
		t.Fatalf("original: %+v", r)
	}

	strict, err := APIGateway(Config{Store: newCounting(t), RequireKey: true}, fn)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := strict(ctx, restRequest("POST", "", `{}`)); r.StatusCode != 400 || problemType(t, r) != retrysafe.ProblemMissingKey {
		t.Fatalf("RequireKey without a key: %+v", r)
	}
}

// TestAPIGatewayStoreStatus: a status StoreStatus refuses is answered and
// its key released; a handler's error releases the key too.
func TestAPIGatewayStoreStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var runs atomic.Int64
	h, err := APIGateway(Config{Store: newCounting(t), StoreStatus: func(s int) bool { return s < 500 }},
		func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
			if runs.Add(1) == 1 {
				return events.APIGatewayProxyResponse{StatusCode: 503}, nil
			}
			if req.Body == "boom" {
				return events.APIGatewayProxyResponse{}, fmt.Errorf("boom")
			}
			return events.APIGatewayProxyResponse{StatusCode: 201}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{503, 201, 201} {
		r, err := h(ctx, restRequest("POST", "s", `{}`))
		if err != nil || r.StatusCode != want {
			t.Fatalf("call %d: %+v, %v; want %d", i, r, err, want)
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("%d runs, want 2 (the 503 released its key)", runs.Load())
	}
	if _, err := h(ctx, restRequest("POST", "e", "boom")); err == nil {
		t.Fatal("the handler's error was not returned")
	}
	if _, err := h(ctx, restRequest("POST", "e", "boom")); err == nil || runs.Load() != 4 {
		t.Fatalf("retry after an error: %v, %d runs; want it to run again", err, runs.Load())
	}
}

// TestHTTPAPI: the 2.0 event format (HTTP APIs, function URLs): the key
// from the lowercased header or from the body, replays, mismatch.
func TestHTTPAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var runs atomic.Int64
	fn := func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: fmt.Sprint(runs.Add(1))}, nil
	}
	req := func(key, query, body string) events.APIGatewayV2HTTPRequest {
		r := events.APIGatewayV2HTTPRequest{RawPath: "/orders", RawQueryString: query, Body: body,
			Headers: map[string]string{"authorization": "Bearer carol"}}
		r.RequestContext.HTTP.Method = "POST"
		if key != "" {
			r.Headers["idempotency-key"] = key
		}
		return r
	}
	h, err := HTTPAPI(Config{Store: newCounting(t)}, fn)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := h(ctx, req("x", "a=1&b=2", `{"q":1}`)); r.Body != "1" {
		t.Fatalf("first: %+v", r)
	}
	if r, _ := h(ctx, req("x", "b=2&a=1", `{"q":1}`)); r.Body != "1" || r.Headers[retrysafe.HeaderReplayed] != "true" {
		t.Fatalf("replay with the query reordered: %+v", r)
	}
	if r, _ := h(ctx, req("x", "a=2", `{"q":1}`)); r.StatusCode != 422 {
		t.Fatalf("another query: %+v, want 422", r)
	}

	byBody, err := HTTPAPI(Config{Store: newCounting(t), Key: "/requestId", Validate: []string{"/amount"}}, fn)
	if err != nil {
		t.Fatal(err)
	}
	b64 := req("", "", "eyJyZXF1ZXN0SWQiOiJyLTEiLCJhbW91bnQiOjV9") // {"requestId":"r-1","amount":5}
	b64.IsBase64Encoded = true
	first, _ := byBody(ctx, b64)
	again, _ := byBody(ctx, req("", "", `{"amount":5,"requestId":"r-1","note":"retry"}`))
	if first.StatusCode != 201 || again.Body != first.Body || again.Headers[retrysafe.HeaderReplayed] != "true" {
		t.Fatalf("key from the body: %+v then %+v", first, again)
	}
}
