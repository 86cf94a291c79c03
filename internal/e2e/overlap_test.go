// Package e2e holds tests that run against every store on the machine's
// real servers: HTTP-level tests, and store/sealed over every store. It is a
// module of its own (it requires every store and driver), so that neither
// the root module nor a store's module carries the other drivers;
// internal/e2e/stores gives its tests isolated stores.
package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/e2e/stores"
)

// TestOverlappingDuplicatesRunOnce fires 100 overlapping requests with one
// key at a slow handler, for each store, in both in-flight modes: exactly
// one execution; every other request gets 409 or (wait mode) the replay.
func TestOverlappingDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	for name, newStore := range stores.All {
		for _, mode := range []retrysafe.InFlightMode{retrysafe.InFlightConflict, retrysafe.InFlightWait} {
			t.Run(name+"/"+string(mode), func(t *testing.T) {
				t.Parallel()
				var runs atomic.Int64
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					n := runs.Add(1)
					time.Sleep(500 * time.Millisecond)
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, `{"run":%d}`, n)
				})
				// A generous store timeout: this test is about exactly-once, and CI runs
				// many packages at once on two cores.
				mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: newStore(t), InFlight: mode, WaitTimeout: 30 * time.Second, StoreTimeout: 30 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				srv := httptest.NewServer(mw(h))
				defer srv.Close()
				const n = 100
				transport := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}
				defer transport.CloseIdleConnections()
				hc := &http.Client{Transport: transport}
				start := make(chan struct{})
				var wg sync.WaitGroup
				var created, replayed, conflicts atomic.Int64
				bodies := make([][]byte, n)
				for i := range n {
					wg.Go(func() {
						<-start
						req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader(`{"amount":100}`))
						req.Header.Set("Idempotency-Key", "burst")
						resp, err := hc.Do(req)
						if err != nil {
							t.Error(err)
							return
						}
						defer resp.Body.Close()
						bodies[i], _ = io.ReadAll(resp.Body)
						switch {
						case resp.StatusCode == http.StatusConflict:
							conflicts.Add(1)
						case resp.StatusCode == http.StatusCreated && resp.Header.Get(retrysafe.HeaderReplayed) == "true":
							replayed.Add(1)
						case resp.StatusCode == http.StatusCreated:
							created.Add(1)
						default:
							t.Errorf("unexpected status %d: %s", resp.StatusCode, bodies[i])
						}
					})
				}
				close(start)
				wg.Wait()
				if runs.Load() != 1 || created.Load() != 1 {
					t.Fatalf("executions %d, first answers %d; want exactly 1", runs.Load(), created.Load())
				}
				if created.Load()+replayed.Load()+conflicts.Load() != n {
					t.Fatalf("answers: created %d replayed %d conflicts %d", created.Load(), replayed.Load(), conflicts.Load())
				}
				if mode == retrysafe.InFlightWait && replayed.Load() != n-1 {
					t.Fatalf("wait mode: %d replays, %d conflicts; want %d replays", replayed.Load(), conflicts.Load(), n-1)
				}
				if mode == retrysafe.InFlightConflict && conflicts.Load() == 0 {
					t.Fatal("no request overlapped the original (no 409): the test did not exercise concurrency")
				}
				var first []byte
				for _, b := range bodies {
					if bytes.HasPrefix(b, []byte(`{"run":`)) {
						if first != nil && !bytes.Equal(first, b) {
							t.Fatalf("answers differ:\n%q\n%q", first, b)
						}
						first = b
					}
				}
				t.Logf("created %d replayed %d conflicts %d", created.Load(), replayed.Load(), conflicts.Load())
			})
		}
	}
}
