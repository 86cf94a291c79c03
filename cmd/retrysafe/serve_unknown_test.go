package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// honestUpstream is a payments service that keeps an effect log and
// answers the gateway's resolve calls from it, honestly. Keys starting
// with "slow-" take effect and then answer too late (the gateway times
// out: the outcome is unknown, and it happened); keys starting with
// "drop-" answer too late on their first attempt without taking effect
// (unknown, and it did not happen).
type honestUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	effects  map[string]string // key → the answer's body
	attempts map[string][]string
	resolves []http.Header // headers of the resolve calls
}

func newHonestUpstream(t *testing.T) *honestUpstream {
	u := &honestUpstream{effects: map[string]string{}, attempts: map[string][]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /pay/", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		key, attempt := r.Header.Get(retrysafe.HeaderKey), r.Header.Get("Idempotency-Attempt")
		u.mu.Lock()
		u.attempts[key] = append(u.attempts[key], attempt)
		late := strings.HasPrefix(key, "slow-") && attempt == "1"
		dropped := strings.HasPrefix(key, "drop-") && attempt == "1"
		body := fmt.Sprintf(`{"charge":%q,"attempt":%s}`, "ch_"+key, attempt)
		if !dropped {
			u.effects[key] = body
		}
		u.mu.Unlock()
		if late || dropped {
			time.Sleep(1500 * time.Millisecond) // past the gateway's --upstream-timeout
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, body)
	})
	mux.HandleFunc("POST /resolve", func(w http.ResponseWriter, r *http.Request) {
		var q struct {
			Key     string `json:"key"`
			Attempt int    `json:"attempt"`
		}
		if err := json.NewDecoder(r.Body).Decode(&q); err != nil || q.Key != r.Header.Get(retrysafe.HeaderKey) {
			http.Error(w, "bad resolve call", http.StatusBadRequest)
			return
		}
		u.mu.Lock()
		u.resolves = append(u.resolves, r.Header.Clone())
		body, done := u.effects[q.Key]
		u.mu.Unlock()
		if !done {
			_, _ = io.WriteString(w, `{"outcome":"not_done"}`)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"outcome": "done", "status": 201,
			"headers": map[string][]string{"Content-Type": {"application/json"}},
			"body":    base64.StdEncoding.EncodeToString([]byte(body))})
	})
	mux.HandleFunc("POST /resolve-hang", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	mux.HandleFunc("POST /resolve-garbage", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"outcome":"done","status":201,"body":"not base64!"}`)
	})
	u.Server = httptest.NewServer(mux)
	t.Cleanup(u.Close)
	return u
}

func (u *honestUpstream) attemptsOf(key string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return strings.Join(u.attempts[key], ",")
}

// unknownConfig is the routes of the end-to-end test: one per policy.
func unknownConfig(t *testing.T, up string) string {
	path := filepath.Join(t.TempDir(), "routes.yaml")
	yaml := fmt.Sprintf(`routes:
  - match: "POST /pay/block"
    on_unknown: block
  - match: "POST /pay/resolve"
    resolve_url: %[1]s/resolve
  - match: "POST /pay/hang"
    resolve_url: %[1]s/resolve-hang
    resolve_timeout: 300ms
  - match: "POST /pay/garbage"
    resolve_url: %[1]s/resolve-garbage
`, up)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// problemOf returns the slug of a problem answer's type.
func problemOf(a *answer) string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal([]byte(a.body), &p)
	return p.Type[strings.LastIndex(p.Type, "/")+1:]
}

const unknownLease = 2 * time.Second

// TestServeUnknownOutcomes runs the binary in front of an upstream that
// times out after its effect, under each policy.
func TestServeUnknownOutcomes(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	up := newHonestUpstream(t)
	// No sweeper: the retries, not the completer, meet the records here.
	gw := startServe(t, bin, "--upstream", up.URL, "--store", "memory:", "--lease", unknownLease.String(),
		"--upstream-timeout", "500ms", "--sweep-interval", "0", "--config", unknownConfig(t, up.URL))
	ctx := context.Background()
	first := func(path, key string) time.Time {
		t.Helper()
		start := time.Now()
		a, err := post(ctx, gw.url+path, key, `{"amount":1}`)
		if err != nil || a.status != http.StatusGatewayTimeout || problemOf(a) != "upstream-outcome-unknown" {
			t.Fatalf("%s %s: %v %+v, want 504 upstream-outcome-unknown", path, key, err, a)
		}
		return start
	}
	retry := func(path, key string) *answer {
		t.Helper()
		a, err := post(ctx, gw.url+path, key, `{"amount":1}`)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	afterLease := func(start time.Time) { time.Sleep(time.Until(start.Add(unknownLease + 200*time.Millisecond))) }

	var wg sync.WaitGroup
	scenario := func(name string, f func(t *testing.T)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(name, f)
		}()
	}
	scenario("abandoned: 409 outcome-unknown at once, Retry-After the lease left", func(t *testing.T) {
		start := first("/pay/takeover", "slow-takeover")
		a := retry("/pay/takeover", "slow-takeover")
		ra, _ := strconv.Atoi(a.header.Get("Retry-After"))
		left := time.Until(start.Add(unknownLease))
		if a.status != http.StatusConflict || problemOf(a) != "outcome-unknown" || ra < 1 || time.Duration(ra)*time.Second < left || ra > 2 {
			t.Fatalf("retry right after the timeout = %d %s (Retry-After %q, lease left %s), want 409 outcome-unknown with Retry-After the lease left",
				a.status, problemOf(a), a.header.Get("Retry-After"), left)
		}
		// takeover (the default): after the lease it runs again, attempt 2.
		afterLease(start)
		if a := retry("/pay/takeover", "slow-takeover"); a.status != http.StatusCreated || !strings.Contains(a.body, `"attempt":2`) {
			t.Fatalf("retry after the lease = %+v, want the takeover's 201", a)
		}
		if got := up.attemptsOf("slow-takeover"); got != "1,2" {
			t.Fatalf("attempts upstream = %s, want 1,2", got)
		}
	})
	scenario("block: still 409 after the lease, nothing runs again", func(t *testing.T) {
		start := first("/pay/block", "slow-block")
		afterLease(start)
		a := retry("/pay/block", "slow-block")
		if a.status != http.StatusConflict || problemOf(a) != "outcome-unknown" {
			t.Fatalf("retry after the lease under block = %d %s", a.status, a.body)
		}
		if got := up.attemptsOf("slow-block"); got != "1" {
			t.Fatalf("attempts upstream = %s, want 1", got)
		}
	})
	scenario("resolve done: the upstream's answer is stored and replayed", func(t *testing.T) {
		start := first("/pay/resolve", "slow-resolve")
		afterLease(start)
		for i := range 2 {
			a := retry("/pay/resolve", "slow-resolve")
			if a.status != http.StatusCreated || a.body != `{"charge":"ch_slow-resolve","attempt":1}` {
				t.Fatalf("retry %d = %d %s, want the first attempt's answer", i, a.status, a.body)
			}
		}
		if got := up.attemptsOf("slow-resolve"); got != "1" {
			t.Fatalf("attempts upstream = %s, want 1 (the resolver said done)", got)
		}
		up.mu.Lock()
		defer up.mu.Unlock()
		found := false
		for _, h := range up.resolves {
			if h.Get(retrysafe.HeaderKey) == "slow-resolve" {
				found = true
				if h.Get("Authorization") != testCredential || h.Get("Idempotency-Attempt") != "1" || h.Get("Content-Type") != "application/json" {
					t.Errorf("resolve call headers = %v", h)
				}
			}
		}
		if !found {
			t.Error("the upstream got no resolve call for slow-resolve")
		}
	})
	scenario("resolve not_done: the takeover runs with Idempotency-Attempt 2", func(t *testing.T) {
		start := first("/pay/resolve", "drop-resolve")
		afterLease(start)
		if a := retry("/pay/resolve", "drop-resolve"); a.status != http.StatusCreated || !strings.Contains(a.body, `"attempt":2`) {
			t.Fatalf("retry = %d %s, want the re-run's 201", a.status, a.body)
		}
		if got := up.attemptsOf("drop-resolve"); got != "1,2" {
			t.Fatalf("attempts upstream = %s, want 1,2", got)
		}
	})
	for _, bad := range []string{"hang", "garbage"} {
		scenario("resolver "+bad+": stays blocked", func(t *testing.T) {
			key := "slow-" + bad
			start := first("/pay/"+bad, key)
			afterLease(start)
			t0 := time.Now()
			a := retry("/pay/"+bad, key)
			if a.status != http.StatusConflict || problemOf(a) != "outcome-unknown" {
				t.Fatalf("retry = %d %s, want 409 outcome-unknown", a.status, a.body)
			}
			if d := time.Since(t0); d > 3*time.Second {
				t.Fatalf("the retry took %s: the resolve timeout did not bound it", d)
			}
			if got := up.attemptsOf(key); got != "1" {
				t.Fatalf("attempts upstream = %s, want 1", got)
			}
		})
	}
	wg.Wait()

	res, err := testenv.HTTPClient.Get(gw.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{`retrysafe_unknown_outcomes{route="POST /pay/block"} 1`, `retrysafe_unknown_outcomes{route="POST /pay/hang"} 1`,
		`retrysafe_unknown_outcomes{route="POST /pay/resolve"} 0`, `retrysafe_resolve_calls_total{outcome="done",source="request"} 1`,
		`retrysafe_resolve_calls_total{outcome="not_done",source="request"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("gateway log:\n%s", gw.stderr)
	}
}

// TestServeCompleter: with a resolve URL and the sweeper on, a stranded
// record is resolved without any retry; the retry then replays it.
func TestServeCompleter(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	up := newHonestUpstream(t)
	gw := startServe(t, bin, "--upstream", up.URL, "--store", "memory:", "--lease", unknownLease.String(),
		"--upstream-timeout", "500ms", "--sweep-interval", "300ms", "--resolve-url", up.URL+"/resolve")
	ctx := context.Background()
	if a, err := post(ctx, gw.url+"/pay/x", "slow-completer", `{}`); err != nil || a.status != http.StatusGatewayTimeout {
		t.Fatalf("first = %v %+v", err, a)
	}
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(gw.stderr.String(), "completer: stranded records resolved") {
		if time.Now().After(deadline) {
			t.Fatalf("the completer resolved nothing; log:\n%s", gw.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	up.mu.Lock()
	calls := len(up.resolves)
	up.mu.Unlock()
	a, err := post(ctx, gw.url+"/pay/x", "slow-completer", `{}`)
	if err != nil || a.status != http.StatusCreated || a.body != `{"charge":"ch_slow-completer","attempt":1}` || a.header.Get(retrysafe.HeaderReplayed) != "true" {
		t.Fatalf("retry after the completer = %v %+v, want the replayed first answer", err, a)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.resolves) != calls {
		t.Fatalf("the retry called the resolver again (%d calls, %d before)", len(up.resolves), calls)
	}
	if got := strings.Join(up.attempts["slow-completer"], ","); got != "1" {
		t.Fatalf("attempts upstream = %s, want 1", got)
	}
}

// TestServeKeysResolve: an operator completes a blocked key with keys
// resolve; the client then gets the operator's answer, and a second
// resolve of the key (no longer unknown) is refused.
func TestServeKeysResolve(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	up := newHonestUpstream(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "records.db")
	gw := startServe(t, bin, "--upstream", up.URL, "--store", db, "--lease", unknownLease.String(),
		"--upstream-timeout", "500ms", "--on-unknown", "block")
	ctx := context.Background()
	start := time.Now()
	if a, err := post(ctx, gw.url+"/pay/x", "slow-operator", `{}`); err != nil || a.status != http.StatusGatewayTimeout {
		t.Fatalf("first = %v %+v", err, a)
	}
	// Once the lease (renewed when the gateway gave up) has run out, the
	// record is an unknown outcome on every store, whether or not it keeps
	// the abandoned mark.
	time.Sleep(time.Until(start.Add(unknownLease)))
	var out []byte
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err = exec.Command(bin, "keys", "show", "slow-operator", "--store", db, "--json").CombinedOutput()
		if err == nil && strings.Contains(string(out), `"state": "unknown"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys show: %v\n%s", err, out)
		}
	}
	body := filepath.Join(t.TempDir(), "answer.json")
	if err := os.WriteFile(body, []byte(`{"charge":"ch_by_operator"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	resolve := exec.Command(bin, "keys", "resolve", "slow-operator", "--store", db, "--scope", scopehash.Sum(testCredential),
		"--complete", "--status", "201", "--body-file", body, "--header", "Content-Type: application/json")
	var stderr strings.Builder
	resolve.Stderr = &stderr
	if out, err := resolve.Output(); err != nil || !strings.Contains(string(out), "retries of the key get the stored 201") {
		t.Fatalf("keys resolve: %v\n%s\n%s", err, out, &stderr)
	}
	if !strings.Contains(stderr.String(), `"action":"complete"`) || !strings.Contains(stderr.String(), `"state_before":"unknown"`) {
		t.Errorf("audit line: %s", &stderr)
	}
	a, err := post(ctx, gw.url+"/pay/x", "slow-operator", `{}`)
	if err != nil || a.status != http.StatusCreated || a.body != `{"charge":"ch_by_operator"}` {
		t.Fatalf("retry after keys resolve = %v %+v, want the operator's answer", err, a)
	}
	again := exec.Command(bin, "keys", "resolve", "slow-operator", "--store", db, "--release")
	out, err = again.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "is completed") {
		t.Fatalf("second keys resolve: %v\n%s, want a refusal", err, out)
	}
	if a, _ := post(ctx, gw.url+"/pay/x", "slow-operator", `{}`); a.body != `{"charge":"ch_by_operator"}` {
		t.Fatalf("after the refused resolve the client gets %+v", a)
	}
	if got := up.attemptsOf("slow-operator"); got != "1" {
		t.Fatalf("attempts upstream = %s, want 1", got)
	}
}
