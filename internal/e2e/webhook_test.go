package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/e2e/stores"
	"github.com/stripe/stripe-go/v82/webhook"
)

// TestStripeWebhooksExactlyOnce puts the gateway, with a Stripe webhook
// route, in front of a counting upstream, on SQLite, PostgreSQL and Redis,
// and delivers 1,000 events signed by stripe-go's own
// webhook.GenerateTestSignedPayload, as Stripe does: each 1–5 times, some
// deliveries at once, retrying every 5xx and 409 until a 2xx, and some
// events answered 500 by the upstream first. Forged deliveries (a wrong
// secret, a body changed after signing) are mixed in, some with the id of
// a genuine event ahead of its first delivery. Then: every event ran
// exactly once after its last 5xx, every duplicate got the stored answer,
// and every forged delivery got 401 with nothing run and nothing stored.
func TestStripeWebhooksExactlyOnce(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"sqlite", "postgres", "redis"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runWebhookDeliveries(t, stores.All[name](t))
		})
	}
}

// plannedEvent is one event and how it is delivered.
type plannedEvent struct {
	id          string
	fails       int  // the upstream answers 500 to its first fails runs
	deliveries  int  // 1–5, more than fails
	concurrent  bool // all deliveries at once rather than one after another
	forgedFirst bool // a forged delivery with its id comes before the genuine ones
}

func runWebhookDeliveries(t *testing.T, store retrysafe.Store) {
	const events = 1000
	const secret = "whsec_e2e_webhook_secret"
	rng := rand.New(rand.NewPCG(33, 1))

	// The counting upstream: runs per event id; 500 for an event's first
	// planned failures, then 200 naming the run.
	var mu sync.Mutex
	runs := map[string]int{}
	failsOf := map[string]int{}
	var forgedSeen atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev struct {
			ID     string `json:"id"`
			Forged bool   `json:"forged"`
		}
		_ = json.Unmarshal(body, &ev)
		if ev.Forged {
			forgedSeen.Add(1)
		}
		time.Sleep(time.Millisecond) // long enough for deliveries to overlap
		mu.Lock()
		runs[ev.ID]++
		n := runs[ev.ID]
		failing := n <= failsOf[ev.ID]
		mu.Unlock()
		if failing {
			http.Error(w, "temporarily broken", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"received":%q,"run":%d}`, ev.ID, n)
	}))
	t.Cleanup(up.Close)

	secrets := filepath.Join(t.TempDir(), "stripe-webhook")
	if err := os.WriteFile(secrets, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	routes, err := gateway.ParseConfig([]byte(`
routes:
  - match: "POST /webhooks/stripe"
    webhook: {scheme: stripe, secrets_file: `+secrets+`}
`), gateway.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	upURL, _ := url.Parse(up.URL)
	g, err := gateway.New(gateway.Config{Upstream: upURL, Store: store, Defaults: gateway.DefaultPolicy(), Routes: routes,
		StoreTimeout: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(transport.CloseIdleConnections)
	hc := &http.Client{Transport: transport, Timeout: time.Minute}

	plan := make([]plannedEvent, events)
	for i := range plan {
		e := plannedEvent{id: fmt.Sprintf("evt_%04d_%x", i, rng.Uint64()), deliveries: 1 + rng.IntN(5)}
		if rng.IntN(4) == 0 {
			e.fails = 1 + rng.IntN(2)
			e.deliveries = max(e.deliveries, e.fails+1)
		}
		e.concurrent = e.deliveries > 1 && rng.IntN(3) == 0
		e.forgedFirst = rng.IntN(10) == 0
		plan[i] = e
		failsOf[e.id] = e.fails
	}

	deliver := func(body []byte, header string) (int, http.Header, []byte) {
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/webhooks/stripe", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		req.Header.Set("Stripe-Signature", header)
		resp, err := hc.Do(req)
		if err != nil {
			t.Error(err)
			return 0, nil, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	// untilAccepted delivers as Stripe does: again after a 5xx or 409,
	// until a 2xx.
	type answer struct {
		body      []byte
		replayed  bool
		fiveXX    int // 5xx answers before the 2xx
		conflicts int // 409 answers before the 2xx (an overlapping delivery)
	}
	untilAccepted := func(body []byte) answer {
		var a answer
		for attempt := 0; ; attempt++ {
			signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret})
			status, h, b := deliver(body, signed.Header)
			switch {
			case status == http.StatusOK:
				a.body, a.replayed = b, h.Get(retrysafe.HeaderReplayed) == "true"
				return a
			case status >= 500:
				a.fiveXX++
			case status == http.StatusConflict:
				a.conflicts++
			default:
				t.Errorf("delivery answered %d %s", status, b)
				return a
			}
			if attempt > 200 {
				t.Errorf("no 2xx after %d attempts", attempt)
				return a
			}
			time.Sleep(time.Duration(1+attempt) * time.Millisecond)
		}
	}
	var forged atomic.Int64
	forge := func(id string, k int) {
		body := fmt.Appendf(nil, `{"id":%q,"object":"event","type":"charge.succeeded","forged":true}`, id)
		var header string
		if k%2 == 0 {
			header = webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: "whsec_a_guess"}).Header
		} else { // signed, then changed
			header = webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(strings.Replace(string(body), `,"forged":true`, "", 1)), Secret: secret}).Header
		}
		status, h, b := deliver(body, header)
		forged.Add(1)
		if status != http.StatusUnauthorized || !strings.HasSuffix(problemTypeOf(b), "/webhook-signature") || h.Get("Content-Type") != retrysafe.ContentTypeProblem {
			t.Errorf("forged delivery of %s: %d %s", id, status, b)
		}
	}

	type outcome struct {
		answers []answer
	}
	results := make([]outcome, events)
	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range work {
				e := plan[i]
				body := fmt.Appendf(nil, `{"id":%q,"object":"event","type":"invoice.paid","data":{"object":{"n":%d}}}`, e.id, i)
				if e.forgedFirst {
					forge(e.id, i)
				}
				answers := make([]answer, e.deliveries)
				if e.concurrent {
					var inner sync.WaitGroup
					for d := range e.deliveries {
						inner.Go(func() { answers[d] = untilAccepted(body) })
					}
					inner.Wait()
				} else {
					for d := range e.deliveries {
						answers[d] = untilAccepted(body)
					}
				}
				if i%7 == 0 {
					forge(fmt.Sprintf("evt_forged_%04d", i), i) // an id no genuine delivery has
				}
				results[i] = outcome{answers: answers}
			}
		})
	}
	for i := range events {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d events, %d forged deliveries in %s", events, forged.Load(), time.Since(start).Round(time.Millisecond))

	if n := forgedSeen.Load(); n != 0 {
		t.Errorf("%d forged deliveries reached the upstream", n)
	}
	deliveries, replays, fiveXX, planned, conflicts := 0, 0, 0, 0, 0
	for i, e := range plan {
		planned += e.fails
		mu.Lock()
		got := runs[e.id]
		mu.Unlock()
		if got != e.fails+1 {
			t.Errorf("%s (%d failures planned, %d deliveries, concurrent %v) ran %d times, want %d: once after its last 5xx",
				e.id, e.fails, e.deliveries, e.concurrent, got, e.fails+1)
		}
		want := fmt.Sprintf(`{"received":%q,"run":%d}`, e.id, e.fails+1)
		fresh := 0
		for _, a := range results[i].answers {
			deliveries++
			fiveXX += a.fiveXX
			conflicts += a.conflicts
			if string(a.body) != want {
				t.Errorf("%s: a delivery got %q, want the stored answer %q", e.id, a.body, want)
			}
			if a.replayed {
				replays++
			} else {
				fresh++
			}
		}
		if fresh != 1 {
			t.Errorf("%s: %d deliveries got a fresh answer, want 1 (every duplicate the stored one)", e.id, fresh)
		}
	}
	for i := 0; i < events; i += 7 {
		_, err := store.Get(context.Background(), &retrysafe.GetParams{Scope: "webhook POST /webhooks/stripe", Key: fmt.Sprintf("evt_forged_%04d", i), Now: time.Now()})
		if !errors.Is(err, retrysafe.ErrNotFound) {
			t.Errorf("a forged delivery's id has a record: %v", err)
		}
	}
	t.Logf("%d accepted deliveries, %d of them replays; %d answered 500 first, %d 409 (overlapping)", deliveries, replays, fiveXX, conflicts)
	// Each run that failed answered one delivery, and only those: the
	// sender saw every planned 500, and no stored answer was a 5xx.
	if fiveXX != planned {
		t.Errorf("deliveries saw %d 5xx answers, want the %d the upstream gave", fiveXX, planned)
	}
	if conflicts == 0 {
		t.Error("no delivery overlapped another of its event (no 409): the test did not test concurrency")
	}
}

func problemTypeOf(b []byte) string {
	var p retrysafe.Problem
	_ = json.Unmarshal(b, &p)
	return p.Type
}
