package retrysafe_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// badBodies are protected requests whose body cannot be read, as raw
// bytes; halfClose says the client then shuts its sending side.
var badBodies = map[string]struct {
	raw       string
	halfClose bool
}{
	"bad chunked framing": {raw: "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: bad-chunk\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"},
	"truncated body":      {raw: "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: truncated\r\nContent-Length: 100\r\n\r\n{\"amount\":", halfClose: true},
	"truncated chunk":     {raw: "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: half-chunk\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"am", halfClose: true},
}

// rawExchange sends raw to addr over TCP (shutting the sending side when
// halfClose) and reads one response.
func rawExchange(t *testing.T, addr, raw string, halfClose bool) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// checkBadBody checks a 400 bad-request-body answer that closes the
// connection.
func checkBadBody(t *testing.T, resp *http.Response, body []byte) {
	t.Helper()
	var p retrysafe.Problem
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != retrysafe.ContentTypeProblem ||
		json.Unmarshal(body, &p) != nil || !strings.HasSuffix(p.Type, "/"+retrysafe.ProblemBadRequestBody) || p.Detail == "" {
		t.Fatalf("answer %d %q %s, want 400 problem %s", resp.StatusCode, resp.Header.Get("Content-Type"), body, retrysafe.ProblemBadRequestBody)
	}
	if !resp.Close {
		t.Errorf("the connection is kept open (header %v), want Connection: close", resp.Header)
	}
}

// TestUnreadableBodyGets400: a protected request whose body cannot be
// read (bad chunked framing, a body cut short) gets 400
// bad-request-body with Connection: close, counted as
// OutcomeBadRequestBody, and nothing runs. It used to get 200 and an
// empty body.
func TestUnreadableBodyGets400(t *testing.T) {
	t.Parallel()
	for name, tc := range badBodies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int64
			obs := &outcomeLog{}
			srv := newServer(t, retrysafe.Config{Observer: obs}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.WriteHeader(http.StatusCreated)
			}))
			resp, body := rawExchange(t, strings.TrimPrefix(srv.URL, "http://"), tc.raw, tc.halfClose)
			checkBadBody(t, resp, body)
			if runs.Load() != 0 {
				t.Fatal("the handler ran")
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if len(obs.outcomes) != 1 || obs.outcomes[0] != retrysafe.OutcomeBadRequestBody {
				t.Fatalf("outcomes %v, want [%s]", obs.outcomes, retrysafe.OutcomeBadRequestBody)
			}
		})
	}
}
