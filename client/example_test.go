package client_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/client"
	"github.com/retrysafe/retrysafe/retrysafetest"
)

// A server that is unavailable once, then creates the charge. The transport
// retries with the same Idempotency-Key, so a server that had recorded the
// first attempt would replay its answer instead of charging twice.
func ExampleTransport() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"ch_1"}`)
	}))
	defer srv.Close()

	var keys []string
	httpClient := &http.Client{Transport: &client.Transport{
		InitialBackoff: 10 * time.Millisecond,
		OnAttempt: func(a client.AttemptInfo) {
			keys = append(keys, a.Key)
			fmt.Printf("attempt %d: status %d, retry %v\n", a.Attempt, a.StatusCode, a.Retry)
		},
	}}
	resp, err := httpClient.Post(srv.URL+"/charges", "application/json", strings.NewReader(`{"amount":100}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	fmt.Println("same key on both attempts:", keys[0] == keys[1] && keys[0] == client.KeyFromResponse(resp))
	fmt.Println("replayed:", client.Replayed(resp))
	// Output:
	// attempt 1: status 503, retry true
	// attempt 2: status 201, retry false
	// 201 {"id":"ch_1"}
	// same key on both attempts: true
	// replayed: false
}

// Persist the key with the pending operation before the first attempt, so a
// process that restarts can retry the same operation with the same key.
func ExampleNewKey() {
	key := client.NewKey()
	// ... save key with the pending order ...
	ctx := client.WithKey(context.Background(), key)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://api.example.com/orders", nil)
	_ = req // send with an http.Client whose Transport is a *client.Transport
	fmt.Println(len(key))
	// Output: 36
}

// Inside a handler protected by retrysafe, the call to the payment provider
// gets a key derived from the incoming operation: when the client retries the
// incoming request, the provider sees the same key again and does not charge
// twice.
func ExampleDeriveKey() {
	// The middleware puts the operation in the handler's context; here
	// retrysafetest builds one, as in a test of the handler.
	ctx, _, err := retrysafetest.OperationContext(context.Background(),
		&retrysafe.Record{Scope: "tenant-a", Key: "order-1"}, time.Hour, nil)
	if err != nil {
		panic(err)
	}

	charge, _ := client.DeriveKey(ctx, "psp-charge")
	again, _ := client.DeriveKey(ctx, "psp-charge")
	receipt, _ := client.DeriveKey(ctx, "send-receipt")
	fmt.Println(charge)
	fmt.Println(charge == again, charge == receipt)

	// WithDerivedKey makes a client.Transport send that key.
	req, _ := http.NewRequestWithContext(client.WithDerivedKey(ctx, "psp-charge"),
		http.MethodPost, "https://psp.example.com/charges", nil)
	_ = req
	// Output:
	// rsd_XVuuyM3TyaKt63fa6Bkp4P8KlsInqaWfPOo-LBNZNvU
	// true false
}
