package main

import (
	"io"
	"log/slog"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/sealed"
)

type limitedStore struct{ *memory.Store }

func (limitedStore) MaxResponseBody() int64 { return 1000 }

// TestFitResponseBody: a store with a body limit lowers the policies that
// keep the default --max-response-body, keeps smaller ones, and refuses a
// larger one set on purpose; a store without a limit changes nothing.
func TestFitResponseBody(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := limitedStore{memory.New(memory.Config{})}
	t.Cleanup(func() { store.Close() })

	defaults := gateway.Policy{MaxResponseBody: retrysafe.DefaultMaxResponseBody}
	routes := []gateway.Route{{Pattern: "POST /a", Policy: gateway.Policy{MaxResponseBody: retrysafe.DefaultMaxResponseBody}}, {Pattern: "POST /b", Policy: gateway.Policy{MaxResponseBody: 500}}}
	if err := fitResponseBody(store, &defaults, routes, logger); err != nil {
		t.Fatal(err)
	}
	if defaults.MaxResponseBody != 1000 || routes[0].Policy.MaxResponseBody != 1000 || routes[1].Policy.MaxResponseBody != 500 {
		t.Fatalf("after fitting: defaults %d, routes %d and %d; want 1000, 1000, 500", defaults.MaxResponseBody, routes[0].Policy.MaxResponseBody, routes[1].Policy.MaxResponseBody)
	}
	big := gateway.Policy{MaxResponseBody: 2000}
	if err := fitResponseBody(store, &big, nil, logger); err == nil {
		t.Fatal("a --max-response-body over the store's limit was accepted")
	}
	routes = []gateway.Route{{Pattern: "POST /c", Policy: gateway.Policy{MaxResponseBody: 4000}}}
	if err := fitResponseBody(store, &gateway.Policy{MaxResponseBody: 10}, routes, logger); err == nil {
		t.Fatal("a route's max response body over the store's limit was accepted")
	}
	// serve hands it the store wrapped by store/sealed: the limit is found below.
	wrapped, err := sealed.New(store, nil, sealed.Config{})
	if err != nil {
		t.Fatal(err)
	}
	viaWrapper := gateway.Policy{MaxResponseBody: retrysafe.DefaultMaxResponseBody}
	if err := fitResponseBody(wrapped, &viaWrapper, nil, logger); err != nil || viaWrapper.MaxResponseBody != 1000 {
		t.Fatalf("through the sealed wrapper: %d, %v; want 1000", viaWrapper.MaxResponseBody, err)
	}
	plain := gateway.Policy{MaxResponseBody: retrysafe.DefaultMaxResponseBody}
	if err := fitResponseBody(store.Store, &plain, nil, logger); err != nil || plain.MaxResponseBody != retrysafe.DefaultMaxResponseBody {
		t.Fatalf("a store without a limit: %d, %v", plain.MaxResponseBody, err)
	}
}
