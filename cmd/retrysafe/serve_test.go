package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

func TestUsage(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		"no command":      {args: nil, code: 2, stderr: []string{"Commands:", "serve"}},
		"help":            {args: []string{"help"}, code: 0, stdout: []string{"Commands:", "serve", "demo"}},
		"unknown":         {args: []string{"bogus"}, code: 2, stderr: []string{`unknown command "bogus"`}},
		"serve --help":    {args: []string{"serve", "--help"}, code: 0, stdout: []string{"Usage:", "-upstream", "-config", "-processing-retention", "Examples:", "retrysafe serve --upstream"}},
		"help serve":      {args: []string{"help", "serve"}, code: 0, stdout: []string{"Usage:", "Examples:"}},
		"serve bad flag":  {args: []string{"serve", "--bogus"}, code: 2, stderr: []string{"bogus", "--help"}},
		"serve no upstrm": {args: []string{"serve"}, code: 2, stderr: []string{"--upstream is required"}},
		"serve bad upstream": {args: []string{"serve", "--upstream", "ftp://x"}, code: 2,
			stderr: []string{"--upstream"}},
		"upstream timeout vs lease": {args: []string{"serve", "--upstream", "http://127.0.0.1:1", "--lease", "10s", "--upstream-timeout", "10s"},
			code: 2, stderr: []string{"--upstream-timeout (10s)", "--lease (10s)"}},
		"retention vs lease": {args: []string{"serve", "--upstream", "http://127.0.0.1:1", "--lease", "1m", "--processing-retention", "1m"},
			code: 2, stderr: []string{"--processing-retention (1m0s)", "--lease (1m0s)"}},
		"bad in-flight": {args: []string{"serve", "--upstream", "http://127.0.0.1:1", "--in-flight", "queue"},
			code: 2, stderr: []string{"--in-flight", "queue"}},
		"bad on-unknown": {args: []string{"serve", "--upstream", "http://127.0.0.1:1", "--on-unknown", "retry"},
			code: 2, stderr: []string{"--on-unknown", `"retry"`, "takeover", "block"}},
		"bad resolve url": {args: []string{"serve", "--upstream", "http://127.0.0.1:1", "--resolve-url", "localhost:3000/resolve"},
			code: 2, stderr: []string{"--resolve-url", "http://"}},
		"bad resolve timeout": {args: []string{"serve", "--upstream", "http://127.0.0.1:1", "--resolve-timeout", "0s"},
			code: 2, stderr: []string{"--resolve-timeout must be positive"}},
		"bad log format": {args: []string{"serve", "--upstream", "http://127.0.0.1:1", "--log-format", "xml"},
			code: 2, stderr: []string{"--log-format"}},
		"bad store statuses": {args: []string{"serve", "--upstream", "http://127.0.0.1:1", "--store-statuses", "2xx,7xx"},
			code: 2, stderr: []string{"--store-statuses", "7xx"}},
		"bad ignore field": {args: []string{"serve", "--upstream", "http://127.0.0.1:1", "--ignore-fields", "meta"},
			code: 2, stderr: []string{"--ignore-fields", "meta"}},
		"bad read timeout": {args: []string{"serve", "--upstream", "http://127.0.0.1:1", "--read-timeout", "0s"},
			code: 2, stderr: []string{"--read-timeout"}},
		"bad write timeout": {args: []string{"serve", "--upstream", "http://127.0.0.1:1", "--write-timeout", "-1s"},
			code: 2, stderr: []string{"--write-timeout"}},
		"unknown store scheme": {args: []string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "mongodb://db"},
			code: 1, stderr: []string{"mongodb", "memory:", "sqlite:PATH", "postgres://", "redis://", "mysql://"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit status %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, &stdout, &stderr)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, &stdout)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, &stderr)
				}
			}
		})
	}
}

func TestServeConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := map[string]struct {
		yaml string
		want []string
	}{
		"unknown field":        {"routes:\n  - match: \"POST /payments\"\n    ttl_hours: 3\n", []string{"ttl_hours", "POST /payments"}},
		"bad in_flight":        {"routes:\n  - match: \"POST /payments\"\n    in_flight: later\n", []string{"in_flight", "later"}},
		"lease too short":      {"routes:\n  - match: \"POST /payments\"\n    lease: 5s\n", []string{"POST /payments", "lease (5s)", "--upstream-timeout (20s)"}},
		"lease over retention": {"routes:\n  - match: \"POST /payments\"\n    lease: 200h\n", []string{"POST /payments", "lease (200h0m0s)", "--processing-retention (168h0m0s)"}},
		"empty file":           {"", []string{"no routes", "--allow-empty-config"}},
		"comments only":        {"# routes: to come\n", []string{"no routes", "--allow-empty-config"}},
		"no routes":            {"routes: []\n", []string{"no routes", "--allow-empty-config"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "memory:", "--config", path}, &stdout, &stderr)
			if code == 0 {
				t.Fatalf("serve started with %s", name)
			}
			for _, w := range append(tc.want, path) {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, &stderr)
				}
			}
		})
	}
}

// The binary is built once and shared by the tests that run at the same
// time; the last one to finish removes it.
var binary struct {
	mu    sync.Mutex
	dir   string
	users int
}

// buildBinary compiles the command into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	binary.mu.Lock()
	defer binary.mu.Unlock()
	if binary.dir == "" {
		dir, err := os.MkdirTemp("", "retrysafe-test-")
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "retrysafe"), ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			t.Fatalf("go build: %v\n%s", err, out)
		}
		binary.dir = dir
	}
	binary.users++
	t.Cleanup(func() {
		binary.mu.Lock()
		defer binary.mu.Unlock()
		if binary.users--; binary.users == 0 {
			os.RemoveAll(binary.dir)
			binary.dir = ""
		}
	})
	return filepath.Join(binary.dir, "retrysafe")
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// gatewayProcess is `retrysafe serve` running as a child process.
type gatewayProcess struct {
	cmd         *exec.Cmd
	url, admin  string
	stderr      *lockedBuffer
	done        chan struct{}
	waitErr     error
	stdoutLines []string
}

// startServe runs `retrysafe serve` with free ports and waits until it
// prints its addresses.
func startServe(t *testing.T, bin string, args ...string) *gatewayProcess {
	t.Helper()
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-format", "text"}, args...)
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &gatewayProcess{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	timeout := time.After(60 * time.Second)
	for p.url == "" || p.admin == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				<-p.done
				t.Fatalf("serve exited: %v\nstderr:\n%s", p.waitErr, p.stderr)
			}
			p.stdoutLines = append(p.stdoutLines, line)
			if _, rest, ok := strings.Cut(line, "listening on "); ok {
				p.url = strings.TrimSuffix(strings.Fields(rest)[0], ",")
			}
			if _, rest, ok := strings.Cut(line, "admin on "); ok {
				p.admin = strings.Fields(rest)[0]
			}
		case <-timeout:
			t.Fatalf("serve printed no addresses; stderr:\n%s", p.stderr)
		}
	}
	go func() {
		for range lines {
		}
	}()
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *gatewayProcess) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not exit; stderr:\n%s", p.stderr)
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		return ee.ExitCode()
	}
	if p.waitErr != nil {
		t.Fatalf("wait: %v", p.waitErr)
	}
	return 0
}

// testCredential is the Authorization of post's requests.
const testCredential = "Bearer test-caller"

type answer struct {
	status int
	header http.Header
	body   string
}

func post(ctx context.Context, url, key, body string) (*answer, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(retrysafe.HeaderKey, key)
	req.Header.Set("Authorization", testCredential) // the scope: a keyed request without one gets 400
	resp, err := testenv.HTTPClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return &answer{status: resp.StatusCode, header: resp.Header, body: string(b)}, err
}

// chargeUpstream counts charges; a charge waits for hold (when set) before
// answering, and signals entered when it starts.
type chargeUpstream struct {
	*httptest.Server
	calls   atomic.Int64
	entered chan int64
	hold    func(n int64) // runs before answering call n
}

func newChargeUpstream(t *testing.T, hold func(n int64)) *chargeUpstream {
	u := &chargeUpstream{entered: make(chan int64, 100), hold: hold}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.calls.Add(1)
		_, _ = io.ReadAll(r.Body)
		u.entered <- n
		if u.hold != nil {
			u.hold(n)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *chargeUpstream) waitEntered(t *testing.T) int64 {
	t.Helper()
	select {
	case n := <-u.entered:
		return n
	case <-time.After(30 * time.Second):
		t.Fatal("the upstream was not reached")
		return 0
	}
}

// TestServeGracefulShutdown runs the real binary: SIGTERM while a slow
// request is in flight lets it finish and store its result, and the process
// exits 0. After a restart on the same SQLite file the retry is replayed.
func TestServeGracefulShutdown(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	up := newChargeUpstream(t, func(int64) { time.Sleep(time.Second) })
	db := "sqlite:" + filepath.Join(t.TempDir(), "retrysafe.db")
	gw := startServe(t, bin, "--upstream", up.URL, "--store", db)

	if res, err := testenv.HTTPClient.Get(gw.admin + "/readyz"); err != nil || res.StatusCode != 200 {
		t.Fatalf("/readyz = %v, %v", res, err)
	}
	key := "graceful-" + fmt.Sprint(time.Now().UnixNano())
	type result struct {
		a   *answer
		err error
	}
	done := make(chan result, 1)
	go func() {
		a, err := post(context.Background(), gw.url+"/payments", key, `{"amount":10}`)
		done <- result{a, err}
	}()
	up.waitEntered(t)
	if err := gw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.a.status != 201 {
		t.Fatalf("in-flight request during shutdown: %+v, %v\nstderr:\n%s", r.a, r.err, gw.stderr)
	}
	if code := gw.wait(t); code != 0 {
		t.Fatalf("exit status %d, want 0\nstderr:\n%s", code, gw.stderr)
	}

	// Restart: the stored result survived.
	gw2 := startServe(t, bin, "--upstream", up.URL, "--store", db)
	again, err := post(context.Background(), gw2.url+"/payments", key, `{"amount":10}`)
	if err != nil || again.status != 201 || again.body != r.a.body || again.header.Get(retrysafe.HeaderReplayed) != "true" {
		t.Fatalf("retry after restart = %+v, %v; want replay of %q", again, err, r.a.body)
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("upstream calls = %d, want 1", n)
	}
	_ = gw2.cmd.Process.Signal(syscall.SIGTERM)
	if code := gw2.wait(t); code != 0 {
		t.Fatalf("second gateway exit status %d", code)
	}
}

// TestServeKill9 kills the gateway in the middle of a request: after a
// restart the lease still holds the key (409), and once it runs out the
// retry runs and completes.
func TestServeKill9(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	release := make(chan struct{})
	up := newChargeUpstream(t, func(n int64) {
		if n == 1 {
			<-release // the first attempt never answers while the gateway lives
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the upstream's Close
	db := "sqlite:" + filepath.Join(t.TempDir(), "retrysafe.db")
	args := []string{"--upstream", up.URL, "--store", db, "--lease", "4s", "--upstream-timeout", "3s"}
	gw := startServe(t, bin, args...)

	key := "kill9-" + fmt.Sprint(time.Now().UnixNano())
	go func() { _, _ = post(context.Background(), gw.url+"/payments", key, `{"amount":10}`) }()
	up.waitEntered(t)
	if err := gw.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	gw.wait(t)
	killed := time.Now()

	gw2 := startServe(t, bin, args...)
	first, err := post(context.Background(), gw2.url+"/payments", key, `{"amount":10}`)
	if err != nil {
		t.Fatal(err)
	}
	if first.status != http.StatusConflict && time.Since(killed) < 4*time.Second {
		t.Fatalf("retry within the lease = %d %s, want 409", first.status, first.body)
	}
	var last *answer
	deadline := time.Now().Add(20 * time.Second)
	for {
		last, err = post(context.Background(), gw2.url+"/payments", key, `{"amount":10}`)
		if err != nil {
			t.Fatal(err)
		}
		if last.status != http.StatusConflict || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last.status != 201 || last.body != `{"charge":2}` {
		t.Fatalf("retry after the lease = %d %s, want the second attempt's 201\nstderr:\n%s", last.status, last.body, gw2.stderr)
	}
	if replay, _ := post(context.Background(), gw2.url+"/payments", key, `{"amount":10}`); replay == nil || replay.body != last.body {
		t.Fatalf("replay = %+v, want %s", replay, last.body)
	}
	if n := up.calls.Load(); n != 2 {
		t.Fatalf("upstream calls = %d, want 2 (the killed attempt and the recovery)", n)
	}
}

// TestServeInProcess runs serve in the test process (under the race
// detector): it prints its addresses, proxies, serves the admin endpoints,
// and returns 0 when its context is cancelled.
func TestServeInProcess(t *testing.T) {
	t.Parallel()
	up := newChargeUpstream(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
			"--upstream", up.URL, "--store", "memory:", "--require-key", "--sweep-interval", "10ms", "--log-format", "text"}, pw, &stderr)
		pw.Close()
	}()
	var proxyURL, adminURL string
	sc := bufio.NewScanner(pr)
	for (proxyURL == "" || adminURL == "") && sc.Scan() {
		line := sc.Text()
		if _, rest, ok := strings.Cut(line, "listening on "); ok {
			proxyURL = strings.TrimSuffix(strings.Fields(rest)[0], ",")
		}
		if _, rest, ok := strings.Cut(line, "admin on "); ok {
			adminURL = strings.Fields(rest)[0]
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if proxyURL == "" || adminURL == "" {
		t.Fatalf("no addresses printed; stderr:\n%s", &stderr)
	}

	first, err := post(ctx, proxyURL+"/payments", "k1", `{"amount":1}`)
	if err != nil || first.status != 201 {
		t.Fatalf("POST = %+v, %v", first, err)
	}
	again, err := post(ctx, proxyURL+"/payments", "k1", `{"amount":1}`)
	if err != nil || again.body != first.body || again.header.Get(retrysafe.HeaderReplayed) != "true" {
		t.Fatalf("retry = %+v, %v", again, err)
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", proxyURL+"/payments", strings.NewReader(`{}`))
	if res, err := testenv.HTTPClient.Do(req); err != nil || res.StatusCode != 400 {
		t.Fatalf("POST without key (--require-key) = %v, %v", res, err)
	} else {
		res.Body.Close()
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		res, err := testenv.HTTPClient.Get(adminURL + path)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("GET %s = %v, %v", path, res, err)
		}
		res.Body.Close()
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit status %d; stderr:\n%s", c, &stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after its context was cancelled")
	}
	if !strings.Contains(stderr.String(), "gateway stopped") {
		t.Errorf("stderr lacks the stop line:\n%s", &stderr)
	}
	if strings.Contains(stderr.String(), "k1") {
		t.Errorf("the key's value was logged:\n%s", &stderr)
	}
}
