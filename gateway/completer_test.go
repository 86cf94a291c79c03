package gateway_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// TestCompleterEncrypted: the completer resolves a stranded record of an
// encrypted store, which lists records under the HMAC of their scope:
// it writes under that stored scope, so the caller's retry then gets the
// resolve URL's answer, decrypted, and nothing runs again.
func TestCompleterEncrypted(t *testing.T) {
	t.Parallel()
	keys := []sealed.Key{{ID: sealed.HMACKeyID, Secret: make([]byte, sealed.KeySize)}, {ID: "k1", Secret: make([]byte, sealed.KeySize)}}
	for _, k := range keys {
		_, _ = rand.Read(k.Secret)
	}
	ring, err := sealed.NewKeyRing(keys...)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sealed.New(testenv.Memory(t), ring, sealed.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var calls, resolves atomic.Int64
	answer := `{"charge":"ch_1"}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if r.URL.Path == "/resolve" {
			resolves.Add(1)
			fmt.Fprintf(w, `{"outcome":"done","status":201,"headers":{"Content-Type":["application/json"]},"body":%q}`,
				base64.StdEncoding.EncodeToString([]byte(answer)))
			return
		}
		calls.Add(1)
		time.Sleep(time.Second) // took effect, answers too late
	}))
	t.Cleanup(up.Close)
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: st, UpstreamTimeout: 300 * time.Millisecond,
		Defaults: gateway.Policy{Lease: time.Second, ResolveURL: mustURL(t, up.URL+"/resolve")}})
	key := newKey()
	if res := send(t, gw.URL, "POST", "/pay", key, `{"amount":1}`); res.Status != http.StatusGatewayTimeout {
		t.Fatalf("first = %s, want 504", res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); gw.RunSweeper(ctx, 100*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, 10*time.Second, "the completer to complete the record", func() bool {
		rec, err := st.Get(t.Context(), &retrysafe.GetParams{Scope: testScope, Key: key, Now: time.Now()})
		return err == nil && rec.State == retrysafe.StateCompleted
	})
	before := resolves.Load()
	res := send(t, gw.URL, "POST", "/pay", key, `{"amount":1}`)
	if res.Status != http.StatusCreated || string(res.Body) != answer || res.Header.Get(retrysafe.HeaderReplayed) != "true" {
		t.Fatalf("retry after the completer = %s, want the resolve URL's answer replayed", res)
	}
	if calls.Load() != 1 || resolves.Load() != before {
		t.Fatalf("upstream calls %d (want 1), resolve calls during the retry %d (want 0)", calls.Load(), resolves.Load()-before)
	}
	metrics := scrape(t, gw.AdminURL)
	for _, want := range []string{`retrysafe_completer_records_total{result="completed"} 1`, `retrysafe_resolve_calls_total{outcome="done",source="completer"} 1`,
		`retrysafe_unknown_outcomes{route="default"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func scrape(t *testing.T, admin string) string {
	t.Helper()
	res, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// TestCompleterNotDoneAwaitsRetry: a not_done from the resolve URL to the
// completer leaves the stranded record for its retry instead of releasing
// it. The upstream keeps the fence docs/gateway.md asks for (not_done for
// attempt N: refuse attempts up to N), so a released record, whose next
// claim would start again at Idempotency-Attempt 1, could never run; left
// in place, the retry takes it over as attempt 2, which the fence admits,
// and the operation runs exactly once more.
func TestCompleterNotDoneAwaitsRetry(t *testing.T) {
	t.Parallel()
	st := testenv.Memory(t)
	var fence atomic.Int64 // the highest attempt declared not done
	var effects atomic.Int64
	var attempts []string
	var mu sync.Mutex
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/resolve" {
			var q struct{ Attempt int64 }
			_ = json.Unmarshal(body, &q)
			for {
				cur := fence.Load()
				if q.Attempt <= cur || fence.CompareAndSwap(cur, q.Attempt) {
					break
				}
			}
			_, _ = io.WriteString(w, `{"outcome":"not_done"}`)
			return
		}
		a, _ := strconv.ParseInt(r.Header.Get("Idempotency-Attempt"), 10, 64)
		mu.Lock()
		attempts = append(attempts, r.Header.Get("Idempotency-Attempt"))
		mu.Unlock()
		if a <= fence.Load() {
			w.WriteHeader(http.StatusConflict) // fenced off: performs nothing
			_, _ = io.WriteString(w, `{"fenced":true}`)
			return
		}
		if a == 1 {
			time.Sleep(time.Second) // the first attempt never answers in time; it performs nothing
			return
		}
		effects.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"charge":"ch_1"}`)
	}))
	t.Cleanup(up.Close)
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: st, UpstreamTimeout: 300 * time.Millisecond,
		Defaults: gateway.Policy{Lease: time.Second, ResolveURL: mustURL(t, up.URL+"/resolve")}})
	key := newKey()
	if res := send(t, gw.URL, "POST", "/pay", key, `{"amount":1}`); res.Status != http.StatusGatewayTimeout {
		t.Fatalf("first = %s, want 504", res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); gw.RunSweeper(ctx, 100*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, 10*time.Second, "the completer to ask about the stranded record", func() bool {
		return strings.Contains(scrape(t, gw.AdminURL), `retrysafe_completer_records_total{result="awaiting_retry"} 1`)
	})
	rec, err := st.Get(t.Context(), &retrysafe.GetParams{Scope: testScope, Key: key, Now: time.Now()})
	if err != nil || rec.State != retrysafe.StateProcessing || rec.Attempt != 1 {
		t.Fatalf("record after the completer's not_done = %+v, %v; want it left processing at attempt 1", rec, err)
	}
	res := send(t, gw.URL, "POST", "/pay", key, `{"amount":1}`)
	if res.Status != http.StatusCreated || string(res.Body) != `{"charge":"ch_1"}` {
		t.Fatalf("retry after the completer = %s, want the takeover's 201", res)
	}
	if effects.Load() != 1 {
		t.Fatalf("effects = %d, want 1", effects.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 2 || attempts[0] != "1" || attempts[1] != "2" {
		t.Fatalf("Idempotency-Attempt sent to the upstream = %q, want [1 2]", attempts)
	}
}
