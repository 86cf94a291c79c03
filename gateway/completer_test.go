package gateway_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
