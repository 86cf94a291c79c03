package retrysafelambda

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// TestDefaultScope: without Config.Scope, two functions sharing a store
// keep their key spaces apart by the function's name. (Not parallel: it
// sets the package variable that lambdacontext fills from the
// environment.)
func TestDefaultScope(t *testing.T) {
	saved := lambdacontext.FunctionName
	defer func() { lambdacontext.FunctionName = saved }()
	store := newCounting(t)
	handlers := map[string]func(context.Context, json.RawMessage) (string, error){}
	for _, name := range []string{"charge", "refund"} {
		lambdacontext.FunctionName = name
		h, err := Func(Config{Store: store, Key: "/id"}, func(ctx context.Context, _ json.RawMessage) (string, error) { return name, nil })
		if err != nil {
			t.Fatal(err)
		}
		handlers[name] = h
	}
	for name, h := range handlers {
		if got, err := h(context.Background(), json.RawMessage(`{"id":"same"}`)); err != nil || got != name {
			t.Fatalf("%s: %q, %v; want its own run", name, got, err)
		}
		if rec := record(t, store, name, "same"); rec == nil {
			t.Fatalf("no record in scope %q", name)
		}
	}
}
