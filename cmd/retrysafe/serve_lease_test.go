package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/gateway"
)

// TestServeLeaseAloneDerivesUpstreamTimeout: "serve --lease 3s" without
// --upstream-timeout starts (the 20s default would contradict the lease),
// with an upstream timeout of two thirds of the lease: a request to an
// upstream that never answers gets 504 after about 2s, not 20s.
func TestServeLeaseAloneDerivesUpstreamTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); up.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "off",
			"--upstream", up.URL, "--store", "memory:", "--lease", "3s"}, pw, &stderr)
		pw.Close()
	}()
	stopped := false
	stop := func() int {
		if stopped {
			return 0
		}
		stopped = true
		cancel()
		return <-code
	}
	t.Cleanup(func() { stop() })
	var addr string
	sc := bufio.NewScanner(pr)
	for addr == "" && sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "listening on http://"); ok {
			addr = strings.TrimSuffix(strings.Fields(rest)[0], ",")
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if addr == "" {
		t.Fatalf("serve --lease 3s did not start; stderr:\n%s", &stderr)
	}

	start := time.Now()
	reqCtx, reqCancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer reqCancel()
	a, err := post(reqCtx, "http://"+addr+"/payments", "k-derived", `{"amount":1}`)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("no answer after %s: %v", took, err)
	}
	if a.status != http.StatusGatewayTimeout || !strings.Contains(a.body, gateway.ProblemOutcomeUnknown) {
		t.Fatalf("answer %d %s, want 504 %s", a.status, a.body, gateway.ProblemOutcomeUnknown)
	}
	if took < 1500*time.Millisecond || took > 10*time.Second {
		t.Fatalf("504 after %s, want about 2s (two thirds of --lease 3s)", took)
	}
	if c := stop(); c != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", c, &stderr)
	}
	// The start-up log line states the timeout in force.
	var started map[string]any
	for line := range strings.SplitSeq(stderr.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "gateway started" {
			started = m
		}
	}
	if started == nil || started["upstream_timeout"] != "2s" || started["lease"] != "3s" {
		t.Fatalf("start-up log line %v, want lease 3s and upstream_timeout 2s; stderr:\n%s", started, &stderr)
	}
}

// TestServeLeaseFlags: the upstream timeout derived from --lease alone, and
// the errors kept for an explicit contradictory pair.
func TestServeLeaseFlags(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		args []string
		want time.Duration // the upstream timeout in force; 0: a usage error
	}{
		"neither":              {nil, gateway.DefaultUpstreamTimeout},
		"lease alone":          {[]string{"--lease", "5s"}, 5 * time.Second * 2 / 3},
		"long lease alone":     {[]string{"--lease", "10m"}, gateway.DefaultUpstreamTimeout},
		"both, consistent":     {[]string{"--lease", "5s", "--upstream-timeout", "4s"}, 4 * time.Second},
		"timeout alone":        {[]string{"--upstream-timeout", "25s"}, 25 * time.Second},
		"both, contradictory":  {[]string{"--lease", "5s", "--upstream-timeout", "20s"}, 0},
		"both, equal":          {[]string{"--lease", "5s", "--upstream-timeout", "5s"}, 0},
		"timeout over default": {[]string{"--upstream-timeout", "30s"}, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var o serveOptions
			fs := newFlagSet("serve", "", "", "", io.Discard, io.Discard)
			o.flags(fs)
			if err := parseFlags(fs, tc.args); err != nil {
				t.Fatal(err)
			}
			o.deriveUpstreamTimeout(fs)
			if tc.want != 0 && o.upstreamTimeout != tc.want {
				t.Fatalf("upstream timeout %s, want %s", o.upstreamTimeout, tc.want)
			}
			// The whole command: a contradictory pair is refused with
			// exit status 2 and both values named.
			var stdout, stderr strings.Builder
			args := append([]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "nosuchstore://x"}, tc.args...)
			code := run(context.Background(), args, &stdout, &stderr)
			if tc.want == 0 {
				if code != 2 || !strings.Contains(stderr.String(), "must be shorter than --lease") {
					t.Fatalf("exit status %d, stderr %q; want 2 and the contradiction", code, stderr.String())
				}
				return
			}
			// Past the flag checks, the made-up store scheme stops it.
			if code != 1 || !strings.Contains(stderr.String(), "unknown scheme") {
				t.Fatalf("exit status %d, stderr %q; want the flags accepted (then the store refused)", code, stderr.String())
			}
		})
	}
}

// TestServeHelpStatesTheLeaseRule: --help says how the upstream timeout
// follows --lease.
func TestServeHelpStatesTheLeaseRule(t *testing.T) {
	t.Parallel()
	var stdout, stderr strings.Builder
	if code := run(context.Background(), []string{"serve", "--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	if !strings.Contains(stdout.String(), "When only --lease is given, the default is two thirds of it, at most 20s") {
		t.Fatalf("--help does not state the rule:\n%s", &stdout)
	}
}
