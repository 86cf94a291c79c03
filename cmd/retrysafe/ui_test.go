package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// lineWriter collects output and signals each write.
type lineWriter struct {
	ch chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.ch <- string(p)
	return len(p), nil
}

// TestUICommand starts "retrysafe ui" on a loopback port, reads a record
// through its page, and stops it with the context.
func TestUICommand(t *testing.T) {
	t.Parallel()
	b := memoryBackend(t)
	if _, err := b.store.Claim(t.Context(), &retrysafe.ClaimParams{Scope: "s", Key: "order-17", Fingerprint: "fp",
		Token: retrysafe.NewToken(), Now: time.Now(), Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	out := &lineWriter{ch: make(chan string, 10)}
	done := make(chan error, 1)
	go func() {
		done <- runUI(ctx, []string{"--store", b.url, "--listen", "127.0.0.1:0"}, out, io.Discard, b.open)
	}()
	var line string
	select {
	case line = <-out.ch:
	case err := <-done:
		t.Fatalf("ui exited: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("ui printed no address")
	}
	_, rest, ok := strings.Cut(line, "operator page on ")
	if !ok {
		t.Fatalf("first line %q", line)
	}
	pageURL := strings.Fields(rest)[0]
	res, err := testenv.HTTPClient.Get(pageURL + "records")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), "order-17") {
		t.Fatalf("GET records: %d\n%s", res.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ui after cancel: %v", err)
	}
}

// The operator page refuses to be served beyond loopback without tokens:
// serve with --ui on, and ui; with a token file it starts. (serve's
// default, --ui loopback, starts on any address: TestShippedCommandsStart.)
func TestAdminBeyondLoopbackNeedsToken(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	db := "sqlite:" + testenv.SQLitePath(t)
	code := run(t.Context(), []string{"serve", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0",
		"--admin-listen", "0.0.0.0:0", "--ui", "on", "--store", db}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "not a loopback address") || !strings.Contains(stderr.String(), "--admin-token-file") {
		t.Errorf("serve --admin-listen 0.0.0.0:0 --ui on without a token: exit %d, stderr %q; want 2 and a refusal", code, stderr.String())
	}
	stderr.Reset()
	code = run(t.Context(), []string{"serve", "--upstream", "http://127.0.0.1:1", "--ui", "public", "--store", db}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "--ui \"public\": want off, loopback or on") {
		t.Errorf("serve --ui public: exit %d, stderr %q; want 2 naming the values", code, stderr.String())
	}
	stderr.Reset()
	code = run(t.Context(), []string{"serve", "--upstream", "http://127.0.0.1:1", "--admin-host", "http://ops.example.com/", "--store", db}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "want a host name") {
		t.Errorf("serve --admin-host URL: exit %d, stderr %q; want 2 asking for a name", code, stderr.String())
	}
	stderr.Reset()
	code = run(t.Context(), []string{"ui", "--store", db, "--listen", "0.0.0.0:0"}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "not a loopback address") {
		t.Errorf("ui --listen 0.0.0.0:0 without a token: exit %d, stderr %q; want 2 and a refusal", code, stderr.String())
	}
	stderr.Reset()
	bad := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(bad, []byte("alice short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code = run(t.Context(), []string{"ui", "--store", db, "--listen", "0.0.0.0:0", "--admin-token-file", bad}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "16 characters") {
		t.Errorf("a token file with a short token: exit %d, stderr %q", code, stderr.String())
	}

	// With a token file, ui starts on a wildcard address and asks for the token.
	good := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(good, []byte("alice 0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	out := &lineWriter{ch: make(chan string, 10)}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"ui", "--store", db, "--listen", "0.0.0.0:0", "--admin-token-file", good}, out, io.Discard)
	}()
	var line string
	select {
	case line = <-out.ch:
	case c := <-done:
		t.Fatalf("ui exited with %d", c)
	case <-time.After(10 * time.Second):
		t.Fatal("ui printed no address")
	}
	_, rest, _ := strings.Cut(line, "operator page on http://")
	port := strings.Fields(rest)[0]
	port = port[strings.LastIndex(port, ":"):]
	page := "http://127.0.0.1" + port
	for _, c := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong-0123456789abcdef", 403}, {"Bearer 0123456789abcdef0123", 200}} {
		req, _ := http.NewRequest("GET", page, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		res, err := testenv.HTTPClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("GET %s with %q: %d, want %d", page, c.auth, res.StatusCode, c.want)
		}
	}
	cancel()
	if c := <-done; c != 0 {
		t.Errorf("ui exit status %d after cancel", c)
	}
}

// keys show and --json print a record's route.
func TestKeysShowRoute(t *testing.T) {
	t.Parallel()
	b := memoryBackend(t)
	if _, err := b.store.Claim(t.Context(), &retrysafe.ClaimParams{Scope: "s", Key: "order-9", Fingerprint: "fp",
		Token: retrysafe.NewToken(), Now: time.Now(), Lease: time.Minute, Route: "POST /orders"}); err != nil {
		t.Fatal(err)
	}
	out, _, err := cliRun(t, b, keysCmdForTest, "show", "order-9")
	if err != nil || !strings.Contains(out, "route") || !strings.Contains(out, "POST /orders") {
		t.Errorf("keys show: %v\n%s", err, out)
	}
	out, _, err = cliRun(t, b, keysCmdForTest, "show", "--json", "order-9")
	if err != nil || !strings.Contains(out, `"route": "POST /orders"`) {
		t.Errorf("keys show --json: %v\n%s", err, out)
	}
}
