package gateway_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// TestBatchMetrics: with a store that group-commits (SQLite, PostgreSQL),
// also behind the sealed wrapper as `retrysafe serve` runs it, /metrics
// carries the batch counters, and after overlapping new requests they
// count every claim and completion; with the memory store they are absent.
func TestBatchMetrics(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds() {
		for _, wrapped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sealed=%v", kind.name, wrapped), func(t *testing.T) {
				t.Parallel()
				var store retrysafe.Store = kind.open(t)
				_, batches := store.(admin.Batcher)
				if wrapped {
					s, err := sealed.New(store, nil, sealed.Config{})
					if err != nil {
						t.Fatal(err)
					}
					store = s
				}
				up := newUpstream(t)
				gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store})
				const requests = 40
				var wg sync.WaitGroup
				for range requests {
					wg.Go(func() {
						if res := send(t, gw.URL, "POST", "/payments", newKey(), `{"amount":1}`); res.Status != 201 {
							t.Errorf("new request: %s", res)
						}
					})
				}
				wg.Wait()
				text := string(send(t, gw.AdminURL, "GET", "/metrics", "", "").Body)
				b := metricValue(t, text, "retrysafe_store_batches_total")
				items := metricValue(t, text, "retrysafe_store_batch_items_total")
				single := metricValue(t, text, "retrysafe_store_batches_single_total")
				alone := metricValue(t, text, "retrysafe_store_batch_alone_total")
				if !batches {
					if b != -1 || items != -1 || single != -1 || alone != -1 {
						t.Fatalf("a store that does not batch has batch metrics: %v %v %v %v", b, items, single, alone)
					}
					return
				}
				// Each new request is a claim and a completion, both batched.
				if b < 1 || items < 2*requests || single < 0 || single > b || alone < 0 || items < b {
					t.Fatalf("batches %v, items %v, single %v, alone %v after %d new requests", b, items, single, alone, requests)
				}
				t.Logf("batches %v, items %v (%.1f per batch), single %v, alone %v", b, items, items/b, single, alone)
			})
		}
	}
}
