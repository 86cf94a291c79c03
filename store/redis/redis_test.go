package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

func errorsIsUnavailable(err error) bool { return errors.Is(err, retrysafe.ErrStoreUnavailable) }

// TestOpen: a Store from a URL works and Close closes its client.
func TestOpen(t *testing.T) {
	t.Parallel()
	requireRedis(t)
	prefix := testPrefix(t)
	ctx := t.Context()
	s, err := redisstore.Open(ctx, "redis://"+redisAddr()+"/0", redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p := claimParams("scope", "open", now, time.Minute)
	res, err := s.Claim(ctx, p)
	if err != nil || !res.Claimed {
		t.Fatalf("Claim: %+v, %v", res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Get(ctx, &retrysafe.GetParams{Scope: "scope", Key: "open", Now: now}); !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Fatalf("Get after Close: %v, want ErrStoreUnavailable (client closed)", err)
	}

	if _, err := redisstore.Open(ctx, "http://example.com", redisstore.Config{}); err == nil {
		t.Error("Open of a non-redis URL succeeded")
	}

	// Open loaded the scripts: a new claim, a takeover claim and a
	// Complete, through any store, are one EVALSHA each that finds its
	// script (a broken digest would cost NOSCRIPT + EVAL on every call).
	c := newClient(t)
	var names []string
	var mu sync.Mutex
	c.AddHook(recorder{func(name string, err error) {
		if !strings.HasPrefix(name, "eval") {
			return // connection setup
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			name += " " + err.Error()
		}
		names = append(names, name)
	}})
	s2, err := redisstore.New(c, redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	// The first claim writes a new key; the second takes the expired
	// lease over.
	p = claimParams("scope", "after-open", now.Add(-time.Minute), time.Second)
	for _, p := range []*retrysafe.ClaimParams{p, claimParams("scope", "after-open", now, time.Minute)} {
		if res, err := s2.Claim(ctx, p); err != nil || !res.Claimed {
			t.Fatalf("claim after Open: %+v, %v", res, err)
		}
	}
	if err := s2.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: "after-open", Token: p.Token, Now: now, TTL: time.Minute}); !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("Complete by the first owner after the takeover: %v, want ErrLeaseLost", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(names, ","); got != "evalsha,evalsha,evalsha" {
		t.Errorf("a claim, a takeover and a Complete after Open sent %q, want \"evalsha,evalsha,evalsha\"", got)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	if _, err := redisstore.New(nil, redisstore.Config{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr()})
	defer c.Close()
	if _, err := redisstore.New(c, redisstore.Config{ProcessingRetention: -time.Second}); err == nil {
		t.Error("New with a negative ProcessingRetention succeeded")
	}
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": redisAddr()}})
	defer ring.Close()
	if _, err := redisstore.New(ring, redisstore.Config{}); err == nil {
		t.Error("New with a *redis.Ring succeeded")
	}
}

// TestKeyLayout: one readable key per record, the scope hashed to a fixed
// width and the store's own hash tag after it, so no key of one scope can
// name another scope's record, nor pick its Redis Cluster slot.
func TestKeyLayout(t *testing.T) {
	t.Parallel()
	s, c, prefix := newStore(t)
	ctx := t.Context()
	now := time.Now()
	// Scope "a" with key "b:c" and scope "a:b" with key "c" must be two
	// records, whatever characters the key holds.
	for _, id := range [][2]string{{"a", "b:c"}, {"a:b", "c"}, {"", "a:b:c"}} {
		if res, err := s.Claim(ctx, claimParams(id[0], id[1], now, time.Minute)); err != nil || !res.Claimed {
			t.Fatalf("Claim(%q, %q): %+v, %v", id[0], id[1], res, err)
		}
	}
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 {
		t.Fatalf("keys under the prefix: %q, want 3", keys)
	}
	for _, k := range keys {
		rest := strings.TrimPrefix(k, prefix)
		if len(rest) < 43 || rest[32] != ':' || strings.Trim(rest[:32], "0123456789abcdef") != "" ||
			rest[33] != '{' || rest[42] != '}' || strings.Trim(rest[34:42], "0123456789abcdef") != "" {
			t.Errorf("key %q: want prefix + 32 hex digits + ':{' + 8 hex digits + '}' + key", k)
		}
		if typ := c.Type(ctx, k).Val(); typ != "hash" {
			t.Errorf("key %q has type %q, want hash", k, typ)
		}
	}
	if !slicesContainsSuffix(keys, "}b:c") || !slicesContainsSuffix(keys, "}a:b:c") {
		t.Errorf("keys %q do not end with the readable record keys", keys)
	}
}

func slicesContainsSuffix(ss []string, suffix string) bool {
	for _, s := range ss {
		if strings.HasSuffix(s, suffix) {
			return true
		}
	}
	return false
}

// TestNativeTTL: Redis PTTL is set on the record in both states, from the
// lease (plus retention) while processing and from the TTL once completed;
// a released record's key is gone.
func TestNativeTTL(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	prefix := testPrefix(t)
	const retention = 10 * time.Minute
	s, err := redisstore.New(c, redisstore.Config{Prefix: prefix, ProcessingRetention: retention})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	// Far from the wall clock on purpose: PX is a duration, not a date.
	now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

	keyOf := func(key string) string {
		keys, err := c.Keys(ctx, prefix+"*}"+key).Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("key of %q: %q, %v", key, keys, err)
		}
		return keys[0]
	}
	wantPTTL := func(what, key string, lo, hi time.Duration) {
		t.Helper()
		d, err := c.PTTL(ctx, keyOf(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if d < lo || d > hi {
			t.Errorf("%s: PTTL %s, want within [%s, %s]", what, d, lo, hi)
		}
	}
	const slack = 5 * time.Second // time between the write and PTTL

	lease := 30 * time.Second
	p := claimParams("scope", "k", now, lease)
	if _, err := s.Claim(ctx, p); err != nil {
		t.Fatal(err)
	}
	wantPTTL("processing", "k", lease+retention-slack, lease+retention)

	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: "scope", Key: "k", Token: p.Token, Now: now, Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	wantPTTL("extended", "k", time.Hour+retention-slack, time.Hour+retention)

	ttl := 2 * time.Hour
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: "k", Token: p.Token, Now: now, TTL: ttl,
		Response: &retrysafe.Response{Status: 201}}); err != nil {
		t.Fatal(err)
	}
	wantPTTL("completed", "k", ttl-slack, ttl)

	// A sub-millisecond lease or TTL still gives a valid PX.
	p2 := claimParams("scope", "tiny", now, time.Nanosecond)
	if _, err := s.Claim(ctx, p2); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: "tiny", Token: p2.Token, Now: now, TTL: time.Nanosecond}); err != nil {
		t.Fatalf("Complete with a 1ns TTL: %v", err)
	}
	if _, err := s.Get(ctx, &retrysafe.GetParams{Scope: "scope", Key: "tiny", Now: now.Add(time.Nanosecond)}); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Errorf("Get after a 1ns TTL: %v, want ErrNotFound", err)
	}

	p3 := claimParams("scope", "released", now, lease)
	if _, err := s.Claim(ctx, p3); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, &retrysafe.ReleaseParams{Scope: "scope", Key: "released", Token: p3.Token}); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, prefix+"*").Result(); n != 0 {
		t.Errorf("EXISTS after release: %d", n)
	}
	if keys, _ := c.Keys(ctx, prefix+"*}released").Result(); len(keys) != 0 {
		t.Errorf("released record's key still exists: %q", keys)
	}
}

// TestTimePrecision: times keep nanoseconds and compare exactly, although
// Lua numbers are doubles: a lease that ends 1ns after Now is live.
func TestTimePrecision(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := t.Context()
	now := time.Date(2031, 3, 4, 5, 6, 7, 123456789, time.UTC)
	p := claimParams("scope", "k", now, time.Second)
	res, err := s.Claim(ctx, p)
	if err != nil || !res.Claimed {
		t.Fatalf("Claim: %+v, %v", res, err)
	}
	if !res.Record.LeaseUntil.Equal(now.Add(time.Second)) {
		t.Fatalf("LeaseUntil = %s, want %s", res.Record.LeaseUntil, now.Add(time.Second))
	}
	end := now.Add(time.Second)
	if res, err := s.Claim(ctx, claimParams("scope", "k", end.Add(-time.Nanosecond), time.Second)); err != nil || res.Claimed {
		t.Fatalf("Claim 1ns before the lease ends: %+v, %v; want blocked", res, err)
	}
	if res, err := s.Claim(ctx, claimParams("scope", "k", end, time.Second)); err != nil || !res.Claimed || res.Record.Attempt != 2 {
		t.Fatalf("Claim when the lease ends: %+v, %v; want a takeover", res, err)
	}
}

// TestScriptFlush: after SCRIPT FLUSH the first call gets NOSCRIPT from
// EVALSHA, falls back to EVAL (which caches the script again) and succeeds;
// the next call is a single EVALSHA again. It flushes the server's script
// cache, so it does not run in parallel with the other tests.
func TestScriptFlush(t *testing.T) {
	c := newClient(t)
	var mu sync.Mutex
	var seen []string
	c.AddHook(recorder{func(name string, err error) {
		if name == "hgetall" || name == "hello" || name == "client" {
			return // Claim's plain read, connection setup: this test is about the scripts
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil && !errors.Is(err, goredis.Nil) {
			name += " " + strings.Fields(err.Error())[0]
		}
		seen = append(seen, name)
	}})
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := seen
		seen = nil
		return out
	}
	prefix := testPrefix(t)
	s, err := redisstore.New(c, redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	now := time.Now()

	calls := []struct {
		name string
		call func(key string) error
	}{
		{"claim", func(key string) error {
			res, err := s.Claim(ctx, claimParams("scope", key, now, time.Minute))
			if err == nil && !res.Claimed {
				err = fmt.Errorf("not claimed: %+v", res.Record)
			}
			return err
		}},
		{"extend", func(key string) error {
			p := claimParams("scope", key, now, time.Minute)
			if _, err := s.Claim(ctx, p); err != nil {
				return err
			}
			take()
			c.ScriptFlush(ctx)
			take()
			return s.Extend(ctx, &retrysafe.ExtendParams{Scope: "scope", Key: key, Token: p.Token, Now: now, Lease: time.Minute})
		}},
		{"complete", func(key string) error {
			p := claimParams("scope", key, now, time.Minute)
			if _, err := s.Claim(ctx, p); err != nil {
				return err
			}
			take()
			c.ScriptFlush(ctx)
			take()
			return s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: key, Token: p.Token, Now: now, TTL: time.Minute, Response: &retrysafe.Response{Status: 200}})
		}},
		{"release", func(key string) error {
			p := claimParams("scope", key, now, time.Minute)
			if _, err := s.Claim(ctx, p); err != nil {
				return err
			}
			take()
			c.ScriptFlush(ctx)
			take()
			return s.Release(ctx, &retrysafe.ReleaseParams{Scope: "scope", Key: key, Token: p.Token})
		}},
	}
	// SCRIPT FLUSH is server-wide, and other tests (other packages of the
	// same run) use the same server and load the same scripts: one of them
	// may reload a script between the flush and the call, which then needs
	// no fallback. Each case retries until it sees the fallback.
	for _, tc := range calls {
		const attempts = 20
		for attempt := 1; ; attempt++ {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			take()
			if err := tc.call(fmt.Sprintf("%s-%d", tc.name, attempt)); err != nil {
				t.Fatalf("%s after SCRIPT FLUSH: %v", tc.name, err)
			}
			got, want := strings.Join(take(), ","), "evalsha NOSCRIPT,eval"
			if got == want {
				break
			}
			if got != "evalsha" || attempt == attempts {
				t.Fatalf("%s after SCRIPT FLUSH sent %q, want %q (attempt %d)", tc.name, got, want, attempt)
			}
		}
	}
	// Once EVAL has loaded a script again, a call is one EVALSHA. (The
	// last case flushed the claim script, so the first claim reloads it.)
	if err := calls[0].call("reload"); err != nil {
		t.Fatal(err)
	}
	take()
	if err := calls[0].call("again"); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(take(), ","), "evalsha"; got != want {
		t.Errorf("claim after the fallback sent %q, want %q", got, want)
	}
}

// recorder is a goredis.Hook that reports each command's name and error.
type recorder struct{ f func(name string, err error) }

func (r recorder) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r recorder) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		r.f(cmd.Name(), err)
		return err
	}
}

func (r recorder) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds { // the store's autopipelined commands
			r.f(cmd.Name(), cmd.Err())
		}
		return err
	}
}

// killClients kills, from killer, every connection whose client name is
// name, until stop is closed, and returns how many it killed.
func killClients(ctx context.Context, killer *goredis.Client, name string, stop <-chan struct{}) int {
	killed := 0
	for {
		select {
		case <-stop:
			return killed
		default:
		}
		list, err := killer.ClientList(ctx).Result()
		if err != nil {
			return killed
		}
		for _, line := range strings.Split(list, "\n") {
			if !strings.Contains(line, " name="+name+" ") {
				continue
			}
			id := strings.TrimPrefix(strings.Fields(line)[0], "id=")
			if n, _ := killer.ClientKillByFilter(ctx, "ID", id).Result(); n > 0 {
				killed++
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestClientKill kills the store's connections with CLIENT KILL while
// claims and completions run on them.
//
// The decision: with go-redis's retries (the default, MaxRetries 3) a call
// on a killed connection is resent on a new one and succeeds, and the
// scripts recognise their own retry, so a claim whose first reply was lost
// still reports Claimed=true; a call that exhausts the retries fails with
// ErrStoreUnavailable. Without retries (MaxRetries -1) a call on a killed
// connection fails with ErrStoreUnavailable. In both modes every error
// matches ErrStoreUnavailable, and no record is wedged: each key is either
// absent, or held by the token that claimed it and completed by it or
// taken over once its lease ends.
func TestClientKill(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name       string
		maxRetries int
	}{{"retries", 0}, {"no retries", -1}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			name := "rs-kill-" + strings.TrimSuffix(strings.TrimPrefix(testPrefix(t), "retrysafe-test:"), ":")
			c := newClient(t, func(o *goredis.Options) {
				o.ClientName = name
				o.MaxRetries = mode.maxRetries
				o.PoolSize = 8
			})
			prefix := testPrefix(t)
			s, err := redisstore.New(c, redisstore.Config{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			killer := newClient(t)
			ctx := t.Context()
			now := time.Now()
			const lease = time.Minute

			type outcome struct {
				key                   string
				token                 string
				claimErr, completeErr error
			}
			const workers, perWorker = 8, 150
			outcomes := make([][]outcome, workers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					<-start
					for i := range perWorker {
						o := outcome{key: fmt.Sprintf("k-%d-%d", w, i)}
						p := claimParams("scope", o.key, now, lease)
						o.token = p.Token
						res, err := s.Claim(ctx, p)
						o.claimErr = err
						if err == nil {
							if !res.Claimed || res.Record.Token != p.Token || res.Record.Attempt != 1 {
								t.Errorf("%s: claim of a fresh key answered %+v, want claimed by its own token, attempt 1", o.key, res.Record)
							}
							o.completeErr = s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: o.key, Token: p.Token, Now: now,
								TTL: time.Minute, Response: &retrysafe.Response{Status: 201, Body: []byte(o.key)}})
						}
						outcomes[w] = append(outcomes[w], o)
					}
				})
			}
			stop := make(chan struct{})
			killedc := make(chan int, 1)
			go func() { killedc <- killClients(ctx, killer, name, stop) }()
			close(start)
			wg.Wait()
			close(stop)
			killed := <-killedc

			var claimErrs, completeErrs int
			for _, os := range outcomes {
				for _, o := range os {
					for _, err := range []error{o.claimErr, o.completeErr} {
						if err != nil && !errors.Is(err, retrysafe.ErrStoreUnavailable) {
							t.Errorf("%s: error %v, want one matching ErrStoreUnavailable", o.key, err)
						}
					}
					if o.claimErr != nil {
						claimErrs++
					}
					if o.completeErr != nil {
						completeErrs++
					}
					checkNotWedged(t, s, o.key, o.token, o.claimErr, o.completeErr, now, lease)
				}
			}
			t.Logf("%s: %d connections killed; %d of %d claims and %d completions failed",
				mode.name, killed, claimErrs, workers*perWorker, completeErrs)
			if killed == 0 {
				t.Error("no connection was killed: the test did not test anything")
			}
		})
	}
}

// checkNotWedged checks a key after its claim and completion ran under
// CLIENT KILL.
func checkNotWedged(t *testing.T, s *redisstore.Store, key, token string, claimErr, completeErr error, now time.Time, lease time.Duration) {
	t.Helper()
	ctx := t.Context()
	rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: "scope", Key: key, Now: now})
	switch {
	case errors.Is(err, retrysafe.ErrNotFound):
		if claimErr == nil {
			t.Errorf("%s: claimed, but the record is gone", key)
		}
		return
	case err != nil:
		t.Fatalf("%s: Get: %v", key, err)
	}
	if rec.Token != token {
		t.Errorf("%s: record held by token %s, want the claimant's %s", key, rec.Token, token)
	}
	switch {
	case rec.State == retrysafe.StateCompleted:
		if rec.Response == nil || string(rec.Response.Body) != key {
			t.Errorf("%s: completed with response %+v", key, rec.Response)
		}
		if claimErr != nil && completeErr == nil {
			t.Errorf("%s: completed although the claim failed", key)
		}
	case claimErr == nil && completeErr == nil:
		t.Errorf("%s: claim and completion succeeded, but the record is %s", key, rec.State)
	default:
		// Processing after a failed call: the claim (or the completion)
		// ran but its answer was lost. The lease bounds the damage: at
		// its end a retry takes the record over.
		res, err := s.Claim(ctx, claimParams("scope", key, now.Add(lease), lease))
		if err != nil || !res.Claimed || res.Record.Attempt != 2 {
			t.Errorf("%s: takeover of a record left processing at the lease end: %+v, %v", key, res, err)
		}
	}
}

// TestRetriedClaim: when go-redis resends a claim whose first attempt ran
// but whose reply was lost, the retry still reports Claimed=true. A reply
// is lost by closing the connection in a hook after the command ran once.
func TestRetriedClaim(t *testing.T) {
	t.Parallel()
	c := newClient(t, func(o *goredis.Options) { o.MaxRetries = 2 })
	var armed atomic.Bool
	c.AddHook(replyLoser{&armed})
	prefix := testPrefix(t)
	s, err := redisstore.New(c, redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	now := time.Now()
	if err := s.Ping(ctx); err != nil { // loads nothing, warms the pool
		t.Fatal(err)
	}
	p := claimParams("scope", "k", now, time.Minute)
	armed.Store(true)
	res, err := s.Claim(ctx, p)
	if err != nil {
		t.Fatalf("claim whose reply was lost once: %v", err)
	}
	if !res.Claimed || res.Record.Token != p.Token {
		t.Fatalf("claim whose reply was lost once: %+v, want Claimed with its own token", res.Record)
	}
	armed.Store(true)
	resp := &retrysafe.Response{Status: 201, Body: []byte("ok")}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: "k", Token: p.Token, Now: now, TTL: time.Minute, Response: resp}); err != nil {
		t.Fatalf("complete whose reply was lost once: %v", err)
	}
	// A second, separate Complete is still fenced.
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: "k", Token: p.Token, Now: now, TTL: time.Minute, Response: resp}); !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("second Complete: %v, want ErrLeaseLost", err)
	}
	// And a second, separate Claim with the same token is blocked.
	if res, err := s.Claim(ctx, p); err != nil || res.Claimed {
		t.Fatalf("second Claim with the same parameters: %+v, %v; want blocked", res, err)
	}
}

// replyLoser is a goredis.Hook that, when armed, runs the next script call
// twice with identical arguments and returns the second answer: exactly
// what a go-redis retry does after a connection broke between the server
// running the command and the client reading its reply.
type replyLoser struct{ armed *atomic.Bool }

func (r replyLoser) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r replyLoser) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && r.armed.CompareAndSwap(true, false) {
			// First attempt: runs on the server, its reply is dropped.
			_ = next(ctx, cmd)
		}
		return next(ctx, cmd)
	}
}

func (r replyLoser) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestSubscribeReconnect: when the shared pub/sub connection is killed,
// go-redis reconnects and resubscribes, and every waiter gets a wake-up to
// re-read; notifications flow again afterwards.
func TestSubscribeReconnect(t *testing.T) {
	t.Parallel()
	name := "rs-sub-" + strings.TrimSuffix(strings.TrimPrefix(testPrefix(t), "retrysafe-test:"), ":")
	s, _, _ := newStore(t, func(o *goredis.Options) { o.ClientName = name })
	killer := newClient(t)
	ctx := t.Context()
	now := time.Now()
	p := claimParams("scope", "k", now, time.Minute)
	if _, err := s.Claim(ctx, p); err != nil {
		t.Fatal(err)
	}
	ch, unsubscribe, err := s.Subscribe(ctx, "scope", "k")
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()

	list, err := killer.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " name="+name+" ") && strings.Contains(line, " sub=1 ") {
			id := strings.TrimPrefix(strings.Fields(line)[0], "id=")
			killed += int(killer.ClientKillByFilter(ctx, "ID", id).Val())
		}
	}
	if killed != 1 {
		t.Fatalf("killed %d pub/sub connections, want 1:\n%s", killed, list)
	}
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("no wake-up after the pub/sub connection was killed")
	}
	// The resubscription is live again: a completion is notified. The
	// wake-up came from the resubscribe confirmation, so it is.
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: "k", Token: p.Token, Now: now, TTL: time.Minute,
		Response: &retrysafe.Response{Status: http.StatusOK}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification after the reconnect")
	}
}

// TestListGlobPrefix: List treats the prefix literally, although SCAN
// takes a glob pattern: a prefix with glob characters does not list
// another prefix's records, nor does a prefix list those of a longer
// prefix that starts with it.
func TestListGlobPrefix(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	base := testPrefix(t)
	ctx := t.Context()
	now := time.Now()
	stores := map[string]*redisstore.Store{}
	for _, p := range []string{base + "[ab]*:", base + "a*:", base + "b:", base + "n:", base + "n:m:"} {
		s, err := redisstore.New(c, redisstore.Config{Prefix: p})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Claim(ctx, claimParams("scope", "k-"+p[len(base):], now, time.Minute)); err != nil {
			t.Fatal(err)
		}
		stores[p] = s
	}
	for p, s := range stores {
		for _, scope := range []string{"", "scope"} {
			recs, err := s.List(ctx, &admin.ListParams{Scope: scope})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 || recs[0].Key != "k-"+p[len(base):] {
				var keys []string
				for _, r := range recs {
					keys = append(keys, r.Key)
				}
				t.Errorf("List(scope %q) with prefix %q: keys %q, want only its own", scope, p, keys)
			}
		}
	}
}
