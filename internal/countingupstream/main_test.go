package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// get returns the body of GET url, failing t on any other status than 200.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := testenv.HTTPClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %q", url, resp.Status, body)
	}
	return string(body)
}

// post sends POST path with key and body and decodes the execution.
func post(t *testing.T, base, path, key, body string) execution {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return execution{}
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := testenv.HTTPClient.Do(req)
	if err != nil {
		t.Error(err)
		return execution{}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("POST %s: %s, want 201", path, resp.Status)
	}
	var e execution
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Errorf("POST %s: decoding the answer: %v", path, err)
	}
	if got := resp.Header.Get("X-Execution"); got != strconv.Itoa(e.Execution) {
		t.Errorf("X-Execution %q, body says execution %d", got, e.Execution)
	}
	return e
}

func TestCountsEveryExecutionPerKey(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(newCounter())
	defer srv.Close()

	// Concurrent executions with one key: each one counts (the upstream
	// deduplicates nothing), and each gets its own number and nonce.
	const n = 16
	var wg sync.WaitGroup
	results := make([]execution, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = post(t, srv.URL, "/payments", "k-1", `{"amount":100}`)
		}()
	}
	wg.Wait()
	sum := sha256.Sum256([]byte(`{"amount":100}`))
	wantSum := hex.EncodeToString(sum[:])
	seen := make(map[int]bool)
	nonces := make(map[string]bool)
	for _, e := range results {
		if e.Key != "k-1" || e.Method != http.MethodPost || e.Path != "/payments" {
			t.Errorf("execution %+v: want key k-1, POST /payments", e)
		}
		if e.BodySHA256 != wantSum {
			t.Errorf("bodySHA256 %q, want %q", e.BodySHA256, wantSum)
		}
		if seen[e.Execution] {
			t.Errorf("execution number %d given twice", e.Execution)
		}
		seen[e.Execution] = true
		if nonces[e.Nonce] {
			t.Errorf("nonce %q given twice", e.Nonce)
		}
		nonces[e.Nonce] = true
	}
	for i := 1; i <= n; i++ {
		if !seen[i] {
			t.Errorf("no execution numbered %d among %d", i, n)
		}
	}
	post(t, srv.URL, "/refunds", "k-2", "x")
	post(t, srv.URL, "/refunds", "", "x")

	for _, tc := range []struct{ query, want string }{
		{"", "18\n"},
		{"?key=k-1", "16\n"},
		{"?key=k-2", "1\n"},
		{"?key=", "1\n"}, // requests without a key
		{"?key=other", "0\n"},
	} {
		if got := get(t, srv.URL+"/executions"+tc.query); got != tc.want {
			t.Errorf("GET /executions%s = %q, want %q", tc.query, got, tc.want)
		}
	}
	// Other GETs are not executions.
	if got := get(t, srv.URL+"/payments"); got != "ok\n" {
		t.Errorf("GET /payments = %q, want ok", got)
	}
	if got := get(t, srv.URL+"/executions"); got != "18\n" {
		t.Errorf("after a GET, /executions = %q, want 18", got)
	}
}

func TestBodyHash(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(newCounter())
	defer srv.Close()
	a := post(t, srv.URL, "/p", "k", "abc")
	b := post(t, srv.URL, "/p", "k", "abc")
	c := post(t, srv.URL, "/p", "k", "abd")
	// SHA-256("abc"), from FIPS 180-2 appendix B.1.
	if want := "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; a.BodySHA256 != want {
		t.Errorf("bodySHA256 of abc = %s, want %s", a.BodySHA256, want)
	}
	if a.BodySHA256 != b.BodySHA256 || a.BodySHA256 == c.BodySHA256 {
		t.Errorf("body hashes %s %s %s: want the first two equal and the third different", a.BodySHA256, b.BodySHA256, c.BodySHA256)
	}
	if a.Nonce == b.Nonce {
		t.Errorf("two executions answered the same nonce %s", a.Nonce)
	}
}

func TestServeWritesAddressAndStops(t *testing.T) {
	t.Parallel()
	addrFile := filepath.Join(t.TempDir(), "addr")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, "127.0.0.1:0", addrFile) }()

	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(addrFile)
		if err == nil {
			addr = strings.TrimSpace(string(b))
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no address in %s after 10s: %v", addrFile, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	post(t, "http://"+addr, "/payments", "k", "{}")
	if got := get(t, "http://"+addr+"/executions?key=k"); got != "1\n" {
		t.Errorf("/executions?key=k = %q, want 1", got)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v after its context ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return 10s after its context ended")
	}
	if _, err := testenv.HTTPClient.Get("http://" + addr + "/executions"); err == nil {
		t.Error("the upstream still answers after serve returned")
	}
}
