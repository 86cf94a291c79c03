package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// These tests measure goroutines and heap of the whole process, so they do
// not run in parallel with others (top-level parallel tests start only
// after every serial one has finished).

// smallSendBuffers makes accepted connections' kernel send buffers small,
// so that a client that does not read blocks the server's writes after a
// few kilobytes, as an 8 MB answer does with default buffers.
type smallSendBuffers struct {
	net.Listener
	on *atomic.Bool
}

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok && l.on.Load() {
		_ = tc.SetWriteBuffer(16 << 10)
	}
	return c, err
}

// serveReal serves a gateway with cfg from its own server constructor on a
// real TCP listener and returns the listener's address. Connections
// accepted while small is set get small send buffers.
func serveReal(t *testing.T, cfg gateway.Config, small *atomic.Bool) string {
	t.Helper()
	cfg.Logger = quietLogger(t)
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := g.NewServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if small == nil {
		small = new(atomic.Bool)
	}
	go srv.Serve(smallSendBuffers{Listener: ln, on: small})
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func quietLogger(t *testing.T) *slog.Logger {
	var w io.Writer = io.Discard
	if testing.Verbose() {
		w = &testWriter{t: t}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// closedByPeer reports whether err says the other end closed the
// connection (not that it is still open: a timeout).
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// settle returns the goroutine count and live heap once the process is
// quiet.
func settle() (goroutines int, heap uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), m.HeapAlloc
}

// serving reports how many connections an http.Server (the gateway's or
// the upstream's) is still serving.
func serving() int {
	buf := make([]byte, 4<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "net/http.(*conn).serve(")
}

// backToBaseline waits (up to a generous bound, not a speed requirement)
// until no connection is being served and the goroutines and the heap are
// back near the baseline.
func backToBaseline(t *testing.T, what string, goroutines int, heap uint64, closeIdle func()) {
	t.Helper()
	var g, conns int
	var h uint64
	deadline := time.Now().Add(30 * time.Second)
	for {
		closeIdle()
		g, h = settle()
		// The heap is polled too: a store may keep the last bodies it wrote
		// for a moment (the SQLite writer holds its batch until it idles).
		if conns = serving(); conns == 0 && g <= goroutines+3 && h <= heap+16<<20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if conns > 0 || g > goroutines+3 {
		buf := make([]byte, 4<<20)
		t.Fatalf("%s: %d connections served, %d goroutines (baseline %d); still running:\n%s", what, conns, g, goroutines, buf[:runtime.Stack(buf, true)])
	}
	if h > heap+16<<20 {
		t.Fatalf("%s: heap %d MiB, baseline %d MiB", what, h>>20, heap>>20)
	}
	t.Logf("%s: %d goroutines (baseline %d), heap %d MiB (baseline %d MiB)", what, g, goroutines, h>>20, heap>>20)
}

// TestStalledUploadsAreCutOff: clients that send all but the last byte of
// their body and stall are cut off at the read timeout: each gets 408 and
// its connection closed, nothing reaches the upstream, no record is left,
// and goroutines and heap return to the baseline while the clients still
// hold their sockets open.
func TestStalledUploadsAreCutOff(t *testing.T) {
	up := newUpstream(t)
	store := memory.New(memory.Config{})
	t.Cleanup(func() { store.Close() })
	tr := &http.Transport{}
	addr := serveReal(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store, Transport: tr,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond}, nil)
	goroutines, heap := settle()

	const clients, size = 30, 1 << 20
	errs := make(chan error, clients+1)
	var wg sync.WaitGroup
	stall := func(i, size int, want408 bool) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			errs <- err
			return
		}
		t.Cleanup(func() { c.Close() })
		head := fmt.Sprintf("POST /payments HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: stall-%d\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", i, size)
		if _, err := io.WriteString(c, head+strings.Repeat("x", size-1)); err != nil && !closedByPeer(err) {
			errs <- fmt.Errorf("client %d: writing: %v", i, err)
			return
		}
		// Stall: the last byte never comes. The server must answer and
		// close the connection on its own. (A server that closes with
		// unread bytes of ours resets the connection, which may discard
		// its answer before we read it.)
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			if want408 || !closedByPeer(err) {
				errs <- fmt.Errorf("client %d: %v, want 408 and the connection closed", i, err)
			}
			return
		}
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), retrysafe.ProblemRequestTimeout) {
			errs <- fmt.Errorf("client %d: %d %s, want 408 request-timeout", i, res.StatusCode, body)
			return
		}
		if _, err := br.ReadByte(); !closedByPeer(err) {
			errs <- fmt.Errorf("client %d: after the answer: %v, want the connection closed", i, err)
		}
	}
	// A small body is read in full before the timeout: this client surely
	// sees the 408. It goes alone, first, so that on a loaded machine the
	// server reads its request well within the (short) read timeout.
	stall(clients, 100, true)
	for i := range clients {
		wg.Go(func() { stall(i, size, false) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := up.calls.Load(); n != 0 {
		t.Errorf("upstream calls = %d, want 0", n)
	}
	for i := range clients + 1 {
		_, err := store.Get(context.Background(), &retrysafe.GetParams{Key: fmt.Sprintf("stall-%d", i), Now: time.Now()})
		if !errors.Is(err, retrysafe.ErrNotFound) {
			t.Errorf("record of stall-%d: %v, want none", i, err)
		}
	}
	// The client sockets are still open here: what is released, the
	// server released.
	backToBaseline(t, "after the stalled uploads", goroutines, heap, tr.CloseIdleConnections)
}

// TestNonReadingClientsAreCutOff: clients that send a protected request
// and never read its 2 MiB answer are cut off at the write timeout;
// goroutines and heap return to the baseline; the result was stored
// before the answer was written, so each retry gets it as a replay and
// the upstream ran once per key.
func TestNonReadingClientsAreCutOff(t *testing.T) {
	up := newUpstream(t)
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "rs.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	tr := &http.Transport{}
	var small atomic.Bool
	small.Store(true)
	addr := serveReal(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store, Transport: tr,
		ReadTimeout: time.Second, WriteTimeout: time.Second}, &small)
	goroutines, heap := settle()

	const clients, size = 20, 2 << 20
	for i := range clients {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
		t.Cleanup(func() { c.Close() })
		req := fmt.Sprintf("POST /big/%d HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer test-caller\r\nIdempotency-Key: noread-%d\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", size, i)
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "every request to reach the upstream", func() bool { return up.calls.Load() == clients })

	// Nobody reads, and 2 MiB cannot fit in the sockets' buffers (16 KiB
	// to send, 4 KiB to receive): a connection the server no longer
	// serves is one whose write it gave up on and closed.
	backToBaseline(t, "with the clients not reading", goroutines, heap, tr.CloseIdleConnections)

	small.Store(false)
	for i := range clients {
		res := send(t, "http://"+addr, "POST", fmt.Sprintf("/big/%d", size), fmt.Sprintf("noread-%d", i), "{}")
		if res.Status != http.StatusCreated || len(res.Body) != size || res.Header.Get(retrysafe.HeaderReplayed) != "true" {
			t.Errorf("retry %d: %d, %d bytes, replayed %q; want the stored 201 of %d bytes", i, res.Status, len(res.Body), res.Header.Get(retrysafe.HeaderReplayed), size)
		}
	}
	if n := up.calls.Load(); n != clients {
		t.Errorf("upstream calls = %d, want %d (one per key)", n, clients)
	}
}

// TestSlowUpstreamIsNotCutOff: the read and write timeouts do not count
// the time the upstream takes, for protected and unprotected requests.
func TestSlowUpstreamIsNotCutOff(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	addr := serveReal(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: memory.New(memory.Config{}),
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, UpstreamTimeout: 5 * time.Second,
		Defaults: gateway.Policy{Lease: 10 * time.Second}}, nil)
	for _, key := range []string{newKey(), ""} {
		res := send(t, "http://"+addr, "POST", "/sleep/800", key, `{"amount":1}`)
		if res.Status != http.StatusCreated {
			t.Errorf("key %q: %s, want the upstream's 201 after its 800ms", key, res)
		}
	}
}
