package gateway_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/store/memory"
)

// BenchmarkProxy compares a plain httputil.ReverseProxy with the gateway
// (memory store) on new keys and on replays, over real sockets. The load
// harness in bench/ measures every store; this isolates the gateway's own
// overhead.
func BenchmarkProxy(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ch_1","amount":100}`)
	}))
	defer upstream.Close()
	target := mustURLB(b, upstream.URL)
	transport := &http.Transport{MaxIdleConnsPerHost: 256}

	plain := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
		Transport: transport,
	})
	defer plain.Close()
	store := memory.New(memory.Config{})
	defer store.Close()
	gw, err := gateway.New(gateway.Config{Upstream: target, Store: store, Transport: transport,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	proxied := httptest.NewServer(gw)
	defer proxied.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

	var seq atomic.Int64
	run := func(b *testing.B, base string, key func() string) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req, _ := http.NewRequest("POST", base+"/payments", strings.NewReader(`{"amount":100}`))
				req.Header.Set("Authorization", "Bearer bench")
				if k := key(); k != "" {
					req.Header.Set("Idempotency-Key", k)
				}
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	b.Run("plain", func(b *testing.B) { run(b, plain.URL, func() string { return "" }) })
	b.Run("gateway-new-keys", func(b *testing.B) {
		run(b, proxied.URL, func() string { return fmt.Sprint("new-", seq.Add(1)) })
	})
	b.Run("gateway-replays", func(b *testing.B) { run(b, proxied.URL, func() string { return "same-key" }) })
}

func mustURLB(b *testing.B, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		b.Fatal(err)
	}
	return u
}
