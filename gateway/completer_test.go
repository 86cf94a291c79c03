package gateway_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// encrypted returns st wrapped in store/sealed under a new key ring.
func encrypted(t *testing.T, st retrysafe.Store) retrysafe.Store {
	t.Helper()
	keys := []sealed.Key{{ID: sealed.HMACKeyID, Secret: make([]byte, sealed.KeySize)}, {ID: "k1", Secret: make([]byte, sealed.KeySize)}}
	for _, k := range keys {
		_, _ = rand.Read(k.Secret)
	}
	ring, err := sealed.NewKeyRing(keys...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sealed.New(st, ring, sealed.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCompleterEncrypted: the completer resolves a stranded record of an
// encrypted store, which lists records under the HMAC of their scope:
// it writes under that stored scope, so the caller's retry then gets the
// resolve URL's answer, decrypted, and nothing runs again.
func TestCompleterEncrypted(t *testing.T) {
	t.Parallel()
	st := encrypted(t, testenv.Memory(t))
	var calls, resolves atomic.Int64
	answer := `{"charge":"ch_1"}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if r.URL.Path == "/resolve" {
			resolves.Add(1)
			fmt.Fprintf(w, `{"outcome":"done","status":201,"headers":{"Content-Type":["application/json"]},"body":%q}`,
				base64.StdEncoding.EncodeToString([]byte(answer)))
			return
		}
		calls.Add(1)
		time.Sleep(time.Second) // took effect, answers too late
	}))
	t.Cleanup(up.Close)
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: st, UpstreamTimeout: 300 * time.Millisecond,
		Defaults: gateway.Policy{Lease: time.Second, ResolveURL: mustURL(t, up.URL+"/resolve")}})
	key := newKey()
	if res := send(t, gw.URL, "POST", "/pay", key, `{"amount":1}`); res.Status != http.StatusGatewayTimeout {
		t.Fatalf("first = %s, want 504", res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); gw.RunSweeper(ctx, 100*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, 10*time.Second, "the completer to complete the record", func() bool {
		rec, err := st.Get(t.Context(), &retrysafe.GetParams{Scope: testScope, Key: key, Now: time.Now()})
		return err == nil && rec.State == retrysafe.StateCompleted
	})
	before := resolves.Load()
	res := send(t, gw.URL, "POST", "/pay", key, `{"amount":1}`)
	if res.Status != http.StatusCreated || string(res.Body) != answer || res.Header.Get(retrysafe.HeaderReplayed) != "true" {
		t.Fatalf("retry after the completer = %s, want the resolve URL's answer replayed", res)
	}
	if calls.Load() != 1 || resolves.Load() != before {
		t.Fatalf("upstream calls %d (want 1), resolve calls during the retry %d (want 0)", calls.Load(), resolves.Load()-before)
	}
	metrics := scrape(t, gw.AdminURL)
	for _, want := range []string{`retrysafe_completer_records_total{result="completed"} 1`, `retrysafe_resolve_calls_total{outcome="done",source="completer"} 1`,
		`retrysafe_unknown_outcomes{route="default"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func scrape(t *testing.T, admin string) string {
	t.Helper()
	res, err := client.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// fencingUpstream is an upstream that keeps the promise docs/gateway.md
// asks of a resolve URL: once it answers not_done for attempt N of a key,
// it refuses that key's attempts up to N (409, performing nothing). Its
// first attempt of every key answers too late and performs nothing. Keys
// listed in undecided get {"outcome":"unknown"} from the resolve URL.
type fencingUpstream struct {
	undecided map[string]bool

	mu       sync.Mutex
	fence    map[string]int      // the highest attempt declared not done, by key
	resolves map[string][]int    // the attempts the resolve URL was asked about, by key
	attempts map[string][]string // the Idempotency-Attempt of each upstream call, by key
	effects  map[string]int
}

func (u *fencingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	if r.URL.Path == "/resolve" {
		var q struct {
			Key     string
			Attempt int
		}
		_ = json.Unmarshal(body, &q)
		u.resolves[q.Key] = append(u.resolves[q.Key], q.Attempt)
		if u.undecided[q.Key] {
			u.mu.Unlock()
			_, _ = io.WriteString(w, `{"outcome":"unknown"}`)
			return
		}
		u.fence[q.Key] = max(u.fence[q.Key], q.Attempt)
		u.mu.Unlock()
		_, _ = io.WriteString(w, `{"outcome":"not_done"}`)
		return
	}
	key := r.Header.Get(retrysafe.HeaderKey)
	a, _ := strconv.Atoi(r.Header.Get(gateway.HeaderAttempt))
	u.attempts[key] = append(u.attempts[key], r.Header.Get(gateway.HeaderAttempt))
	switch {
	case a <= u.fence[key]:
		u.mu.Unlock()
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, `{"fenced":true}`)
	case a == 1:
		u.mu.Unlock()
		time.Sleep(1500 * time.Millisecond) // answers after the gateway gave up
	default:
		u.effects[key]++
		u.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"charge":"ch_1"}`)
	}
}

// TestCompleterNotDoneAwaitsRetry: when the resolve URL tells the
// completer an attempt N is not done, the completer (the engine's
// ResolveStranded) leaves the record for its retry instead of releasing it (a released key's next claim starts
// again at Idempotency-Attempt 1, which the upstream's fence refuses for
// ever). The record reads as awaiting retry, not as an unknown outcome;
// later passes do not ask about it again; and the client's retry, under
// either on-unknown policy, takes it over as attempt N+1, which the fence
// admits, and gets the upstream's answer.
func TestCompleterNotDoneAwaitsRetry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy    retrysafe.UnknownPolicy
		encrypted bool // the mark keeps a sealed checkpoint, sealed again
	}{{retrysafe.OnUnknownTakeover, false}, {retrysafe.OnUnknownBlock, false}, {retrysafe.OnUnknownBlock, true}} {
		policy := tc.policy
		name := string(policy)
		if tc.encrypted {
			name += " encrypted"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var st retrysafe.Store = testenv.Memory(t)
			if tc.encrypted {
				st = encrypted(t, st)
			}
			key, other := newKey(), newKey()
			u := &fencingUpstream{undecided: map[string]bool{other: true}, fence: map[string]int{},
				resolves: map[string][]int{}, attempts: map[string][]string{}, effects: map[string]int{}}
			up := httptest.NewServer(u)
			t.Cleanup(up.Close)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: st, UpstreamTimeout: time.Second,
				Defaults: gateway.Policy{Lease: 2 * time.Second, OnUnknown: policy, ResolveURL: mustURL(t, up.URL+"/resolve")}})
			for _, k := range []string{key, other} {
				if res := send(t, gw.URL, "POST", "/pay", k, `{"amount":1}`); res.Status != http.StatusGatewayTimeout {
					t.Fatalf("first attempt of %s = %s, want 504", k, res)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); gw.RunSweeper(ctx, 50*time.Millisecond) }()
			t.Cleanup(func() { cancel(); <-done })

			get := func() (*retrysafe.Record, error) {
				return st.Get(t.Context(), &retrysafe.GetParams{Scope: testScope, Key: key, Now: time.Now()})
			}
			eventually(t, 10*time.Second, "the completer to decide about the stranded record", func() bool {
				u.mu.Lock()
				defer u.mu.Unlock()
				return len(u.resolves[key]) > 0
			})
			eventually(t, 10*time.Second, "the completer to leave the record awaiting its retry", func() bool {
				rec, err := get()
				return err != nil || admin.StatusOf(rec, time.Now()) != admin.StatusUnknown
			})
			rec, err := get()
			if err != nil || rec.State != retrysafe.StateProcessing || rec.Attempt != 1 || admin.StatusOf(rec, time.Now()) != admin.StatusAwaitingRetry {
				t.Errorf("record after the completer's not_done = %+v, %v; want it processing at attempt 1, awaiting retry", rec, err)
			}
			// Two more passes: each asks about the undecided record
			// again, and none about the one resolved not done.
			blocked := func() int {
				m := regexp.MustCompile(`retrysafe_completer_records_total\{result="blocked"\} (\d+)`).FindStringSubmatch(scrape(t, gw.AdminURL))
				if m == nil {
					return 0
				}
				n, _ := strconv.Atoi(m[1])
				return n
			}
			before := blocked()
			eventually(t, 10*time.Second, "two more completer passes", func() bool { return blocked() >= before+2 })
			metrics := scrape(t, gw.AdminURL)
			for _, want := range []string{`retrysafe_completer_records_total{result="awaiting_retry"} 1`,
				`retrysafe_unknown_outcomes{route="default"} 1`} { // the undecided one only
				if !strings.Contains(metrics, want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
			res := send(t, gw.URL, "POST", "/pay", key, `{"amount":1}`)
			if res.Status != http.StatusCreated || string(res.Body) != `{"charge":"ch_1"}` {
				t.Errorf("retry after the completer's not_done = %s, want the upstream's 201", res)
			}
			// The takeover is counted with the cause attempt 1 recorded,
			// which the completer's mark keeps.
			if want := `retrysafe_unknown_takeovers_total{cause="timeout",route="default"} 1`; !strings.Contains(scrape(t, gw.AdminURL), want) {
				t.Errorf("/metrics lacks %s", want)
			}
			u.mu.Lock()
			defer u.mu.Unlock()
			if got := u.attempts[key]; len(got) != 2 || got[0] != "1" || got[1] != "2" {
				t.Errorf("Idempotency-Attempt of the upstream calls = %q, want [1 2]", got)
			}
			if got := u.resolves[key]; len(got) != 1 || got[0] != 1 {
				t.Errorf("resolve URL asked about attempts %v of the key, want [1] (once, by the completer)", got)
			}
			if u.effects[key] != 1 {
				t.Errorf("effects = %d, want 1", u.effects[key])
			}
		})
	}
}
