package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// jsonLines checks that every line of a JSON log is one JSON object and
// returns them.
func jsonLines(t *testing.T, log string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for i, line := range strings.Split(strings.TrimRight(log, "\n"), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("line %d is not JSON (%v): %s", i+1, err, line)
			continue
		}
		recs = append(recs, rec)
	}
	return recs
}

// countGoRedis counts the records that came from go-redis's own logger.
func countGoRedis(recs []map[string]any) int {
	n := 0
	for _, r := range recs {
		if r["logger"] == "go-redis" {
			n++
		}
	}
	return n
}

// closedPort returns a local address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestServeRedisDownStartJSONLog: serve with a Redis store on a port where
// nothing listens fails to start; its stderr, go-redis's connection-pool
// complaints and the final error included, is JSON, line by line.
func TestServeRedisDownStartJSONLog(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "off",
		"--upstream", "http://127.0.0.1:1", "--store", "redis://"+closedPort(t)+"/0")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("serve: %v, want exit status 1; stderr:\n%s", err, &stderr)
	}
	recs := jsonLines(t, stderr.String())
	if countGoRedis(recs) == 0 {
		t.Errorf("no go-redis line went through the gateway's logger; stderr:\n%s", &stderr)
	}
	last := recs[len(recs)-1]
	if last["level"] != "ERROR" || last["msg"] != "serve failed" || !strings.Contains(last["err"].(string), "connection refused") {
		t.Errorf("last line %v, want the start-up failure", last)
	}
}

// TestServeRedisLostJSONLog: a gateway whose Redis goes away while it runs
// answers 503, and every line it writes meanwhile (go-redis's own among
// them) is JSON. Redis is reached through a proxy the test cuts, so the
// shared server is left alone.
func TestServeRedisLostJSONLog(t *testing.T) {
	t.Parallel()
	redisAddr := testenv.RedisAddr()
	if c, err := net.DialTimeout("tcp", redisAddr, 2*time.Second); err != nil {
		testenv.Unreachable(t, "Redis", err)
	} else {
		c.Close()
	}
	proxy := newCutProxy(t, redisAddr)
	bin := buildBinary(t)
	up := newChargeUpstream(t, nil)
	gw := startServe(t, bin, "--upstream", up.URL, "--log-format", "json",
		"--store", "redis://"+proxy.addr()+"/0?retrysafe_prefix="+testenv.Name("rs-logs")+":")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if a, err := post(ctx, gw.url+"/payments", "k-before", `{"amount":1}`); err != nil || a.status != http.StatusCreated {
		t.Fatalf("with Redis up: %v %+v", err, a)
	}
	proxy.cut()
	a, err := post(ctx, gw.url+"/payments", "k-after", `{"amount":2}`)
	if err != nil || a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, retrysafe.ProblemStoreUnavailable) {
		t.Fatalf("with Redis gone: %v %+v, want 503 %s", err, a, retrysafe.ProblemStoreUnavailable)
	}
	// go-redis logs its dial failures as the pool tries to refill.
	deadline := time.Now().Add(20 * time.Second)
	for countGoRedis(jsonLines(t, gw.stderr.String())) == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if err := gw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	gw.wait(t)
	recs := jsonLines(t, gw.stderr.String())
	if countGoRedis(recs) == 0 {
		t.Errorf("no go-redis line went through the gateway's logger; stderr:\n%s", gw.stderr)
	}
	if up.calls.Load() != 1 {
		t.Errorf("upstream calls = %d, want 1 (nothing forwarded while the store is down)", up.calls.Load())
	}
}

// cutProxy forwards TCP connections to a target until cut, then refuses
// new ones and breaks the open ones.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Go(func() { _, _ = io.Copy(u, c); u.Close() })
		p.wg.Go(func() { _, _ = io.Copy(c, u); c.Close() })
	}
}

// cut closes the listener (new connections are refused: nothing listens
// on the port any more) and every open connection.
func (p *cutProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
