package gateway_test

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
)

// TestUnreadableBodyGets400 sends protected requests whose body cannot be
// read over raw TCP: bad chunked framing, a Content-Length body cut short
// by a half-close. Each gets 400 bad-request-body with Connection: close,
// nothing reaches the upstream, and the log line and the metrics say
// bad_request_body with the status sent. They used to get 200 with an
// empty body, logged as client_gone with status 0 and counted nowhere.
func TestUnreadableBodyGets400(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	var buf syncBuffer
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: storeKinds()[0].open(t),
		Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	addr := strings.TrimPrefix(gw.URL, "http://")
	for name, tc := range map[string]struct {
		raw       string
		halfClose bool
	}{
		"bad chunked framing": {raw: "POST /payments HTTP/1.1\r\nHost: x\r\nIdempotency-Key: " + newKey() + "\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"},
		"truncated body":      {raw: "POST /payments HTTP/1.1\r\nHost: x\r\nIdempotency-Key: " + newKey() + "\r\nContent-Length: 100\r\n\r\n{\"amount\":", halfClose: true},
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(conn, tc.raw); err != nil {
			t.Fatal(err)
		}
		if tc.halfClose {
			_ = conn.(*net.TCPConn).CloseWrite()
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: no response: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		conn.Close()
		var p retrysafe.Problem
		if resp.StatusCode != 400 || json.Unmarshal(body, &p) != nil || !strings.HasSuffix(p.Type, "/"+retrysafe.ProblemBadRequestBody) {
			t.Fatalf("%s: answer %d %s, want 400 %s", name, resp.StatusCode, body, retrysafe.ProblemBadRequestBody)
		}
		if !resp.Close {
			t.Errorf("%s: connection kept open, want Connection: close", name)
		}
	}
	if n := up.calls.Load(); n != 0 {
		t.Fatalf("the upstream got %d requests, want none", n)
	}
	eventually(t, 10*time.Second, "two request log lines", func() bool {
		n := 0
		for _, l := range buf.lines(t) {
			if l["msg"] == "request" {
				n++
			}
		}
		return n == 2
	})
	for _, l := range buf.lines(t) {
		if l["msg"] == "request" && (l["outcome"] != string(retrysafe.OutcomeBadRequestBody) || l["status"] != float64(400)) {
			t.Errorf("log line %v, want outcome %s and status 400", l, retrysafe.OutcomeBadRequestBody)
		}
	}
	text := string(send(t, gw.AdminURL, "GET", "/metrics", "", "").Body)
	if got := metricValue(t, text, `retrysafe_requests_total{outcome="bad_request_body"}`); got != 2 {
		t.Errorf("retrysafe_requests_total{outcome=\"bad_request_body\"} = %v, want 2", got)
	}
}
