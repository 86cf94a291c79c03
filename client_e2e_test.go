package retrysafe_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/client"
)

// TestLostResponseIsReplayedToTheRetryingClient: the server charges, then
// the response is lost on the way back (the connection is cut). The client
// transport retries with the same key and gets the original answer, marked
// as replayed; the handler ran once.
func TestLostResponseIsReplayedToTheRetryingClient(t *testing.T) {
	t.Parallel()
	h := &counter{}
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: newMemory(t), RequireKey: true})
	if err != nil {
		t.Fatal(err)
	}
	protected := mw(h)
	var requests atomic.Int64
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		if requests.Add(1) == 1 {
			protected.ServeHTTP(httptest.NewRecorder(), r) // the work is done…
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close() // …and the answer never arrives
			}
			return
		}
		protected.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	var attempts []client.AttemptInfo
	hc := &http.Client{Transport: &client.Transport{
		InitialBackoff: 10 * time.Millisecond,
		OnAttempt:      func(a client.AttemptInfo) { attempts = append(attempts, a) },
	}}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":49900}`))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || !client.Replayed(resp) {
		t.Fatalf("got %d replayed=%v body %q; want the original 201, replayed", resp.StatusCode, client.Replayed(resp), body)
	}
	if !strings.HasPrefix(string(body), `{"run":`) {
		t.Fatalf("body %q is not the handler's answer", body)
	}
	if h.runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", h.runs.Load())
	}
	if len(keys) < 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Fatalf("keys seen by the server: %q; want one key reused on the retry", keys)
	}
	if len(attempts) < 2 || attempts[0].Err == nil {
		t.Fatalf("attempts: %+v; want a failed first attempt and a retry", attempts)
	}
}
