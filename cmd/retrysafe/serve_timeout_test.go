package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// TestServeReadTimeout: --read-timeout reaches the proxy listener: a
// client that stalls before the end of its body gets 408 and its
// connection closed, and nothing reaches the upstream.
func TestServeReadTimeout(t *testing.T) {
	t.Parallel()
	up := newChargeUpstream(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "off",
			"--upstream", up.URL, "--store", "memory:", "--read-timeout", "300ms", "--write-timeout", "300ms"}, pw, &stderr)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		<-code
	})
	var addr string
	sc := bufio.NewScanner(pr)
	for addr == "" && sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "listening on http://"); ok {
			addr = strings.TrimSuffix(strings.Fields(rest)[0], ",")
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if addr == "" {
		t.Fatalf("no address printed; stderr:\n%s", &stderr)
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /payments HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer test-caller\r\nIdempotency-Key: k\r\nContent-Length: 100\r\n\r\n%s", strings.Repeat("x", 99))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second)) // well under the 30s default
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), retrysafe.ProblemRequestTimeout) {
		t.Fatalf("answer %d %s, want 408 request-timeout", res.StatusCode, body)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer: %v, want the connection closed", err)
	}
	if n := up.calls.Load(); n != 0 {
		t.Fatalf("upstream calls = %d, want 0", n)
	}
}
