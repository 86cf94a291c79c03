package gateway_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/store/memory"
)

// A payments service that charges on every POST, behind the gateway: the
// retry with the same key is answered from the store.
func Example() {
	var charges atomic.Int64
	service := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	}))
	defer service.Close()

	store := memory.New(memory.Config{})
	defer store.Close()
	upstream, _ := url.Parse(service.URL)
	gw, err := gateway.New(gateway.Config{
		Upstream: upstream,
		Store:    store,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	proxy := httptest.NewServer(gw)
	defer proxy.Close()

	for range 2 {
		req, _ := http.NewRequest("POST", proxy.URL+"/payments", strings.NewReader(`{"amount":10}`))
		req.Header.Set("Authorization", "Bearer sk_test_caller") // the scope: keys are per caller
		req.Header.Set("Idempotency-Key", "order-42")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s replayed=%q\n", resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed"))
	}
	fmt.Println("charges:", charges.Load())
	// Output:
	// 201 {"charge":1} replayed=""
	// 201 {"charge":1} replayed="true"
	// charges: 1
}

func ExampleParseConfig() {
	routes, err := gateway.ParseConfig([]byte(`
routes:
  - match: "POST /payments"
    require_key: true
    in_flight: wait
  - match: "POST /orders/{id}/refunds"
    store_statuses: ["2xx", "4xx"]
`), gateway.DefaultPolicy())
	if err != nil {
		panic(err)
	}
	for _, r := range routes {
		fmt.Printf("%s: methods=%v require_key=%v in_flight=%s store_statuses=%q\n",
			r.Pattern, r.Policy.Methods, r.Policy.RequireKey, r.Policy.InFlight, r.Policy.StoreStatuses)
	}

	_, err = gateway.ParseConfig([]byte("routes:\n  - match: \"POST /payments\"\n    ttl: 1d\n"), gateway.DefaultPolicy())
	fmt.Println(err)
	// Output:
	// POST /payments: methods=[POST] require_key=true in_flight=wait store_statuses=""
	// POST /orders/{id}/refunds: methods=[POST] require_key=false in_flight=conflict store_statuses="2xx,4xx"
	// line 2: routes[0] ("POST /payments"): ttl: "1d" is not a positive duration (write it with a unit, like 30s, 5m or 24h)
}
