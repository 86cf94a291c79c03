package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// runHealthArgs runs "retrysafe health ARGS" and returns the exit status and stderr.
func runHealthArgs(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"health"}, args...), &stdout, &stderr)
	return code, stderr.String()
}

func TestHealth(t *testing.T) {
	t.Parallel()
	var paths []string
	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("ok\n"))
	}))
	defer ready.Close()
	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "store: connection refused", http.StatusServiceUnavailable)
	}))
	defer notReady.Close()
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"ready", []string{"--admin", ready.URL}, 0, ""},
		{"ready, trailing slash", []string{"--admin", ready.URL + "/"}, 0, ""},
		{"503", []string{"--admin", notReady.URL}, 1, "503 Service Unavailable: store: connection refused"},
		{"unreachable", []string{"--admin", closed}, 1, "connection refused"},
		{"timeout", []string{"--admin", slow.URL, "--timeout", "50ms"}, 1, "no answer within 50ms"},
		{"no admin", nil, 2, "--admin is required"},
		{"not a URL", []string{"--admin", "http://[::1"}, 2, "is not a URL"},
		{"not http", []string{"--admin", "localhost:9090"}, 2, "want an http:// or https:// URL"},
		{"no host", []string{"--admin", "http:///readyz"}, 2, "has no host"},
		{"bad timeout", []string{"--admin", ready.URL, "--timeout", "0s"}, 2, "--timeout must be positive"},
		{"extra argument", []string{"--admin", ready.URL, "now"}, 2, "unexpected argument"},
	} {
		code, stderr := runHealthArgs(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and %q", tc.name, code, stderr, tc.code, tc.want)
		}
		if tc.code == 1 && strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%s: reason is not one line: %q", tc.name, stderr)
		}
		if tc.code == 0 && stderr != "" {
			t.Errorf("%s: stderr %q, want nothing", tc.name, stderr)
		}
	}
	if len(paths) != 2 || paths[0] != "GET /readyz" || paths[1] != "GET /readyz" {
		t.Errorf("ready server saw %q, want two GET /readyz", paths)
	}
}

func TestHealthHelp(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"health", "--help"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "retrysafe health --admin http://127.0.0.1:9090") {
		t.Errorf("health --help: exit %d, stdout %q", code, stdout.String())
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"--help"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "  health ") {
		t.Errorf("--help does not list health: %q", stdout.String())
	}
}
