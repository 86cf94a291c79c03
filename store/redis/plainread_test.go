package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

// commandCounts counts the script commands (EVAL, EVALSHA), the plain
// reads (HGETALL) and the RESTOREs a client sends.
type commandCounts struct{ scripts, reads, restores atomic.Int64 }

func countCommands(c *goredis.Client) *commandCounts {
	var n commandCounts
	c.AddHook(recorder{func(name string, _ error) {
		switch {
		case strings.HasPrefix(name, "eval"):
			n.scripts.Add(1)
		case name == "hgetall":
			n.reads.Add(1)
		case name == "restore":
			n.restores.Add(1)
		}
	}})
	return &n
}

func (n *commandCounts) reset() { n.scripts.Store(0); n.reads.Store(0); n.restores.Store(0) }

// counts returns (reads, restores, scripts).
func (n *commandCounts) counts() [3]int64 {
	return [3]int64{n.reads.Load(), n.restores.Load(), n.scripts.Load()}
}

// claimOrders are Claim's two paths, forced, for tests that must cover
// both.
var claimOrders = []struct {
	name  string
	order int
}{
	{"read first", redisstore.ClaimReadFirst},
	{"write first", redisstore.ClaimWriteFirst},
}

// restrictedClient returns a client of a user whom the server refuses
// RESTORE (an ACL that lacks it, as some managed services have), deleted
// at cleanup.
func restrictedClient(t *testing.T) *goredis.Client {
	t.Helper()
	admin := newClient(t)
	user := "retrysafe-norestore-" + strings.Trim(strings.TrimPrefix(testPrefix(t), "retrysafe-test:"), ":")
	if err := admin.Do(t.Context(), "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-restore").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	return newClient(t, func(o *goredis.Options) { o.Username, o.Password = user, "pw" })
}

// TestClaimEveryState claims a record in every state on each of Claim's
// paths, and with a server that refuses RESTORE: every path gives the same
// answer, the record as stored (response byte for byte). Read first, a
// claim that a record blocks (a replay, an in-flight duplicate, a mismatch
// on an expired lease) sends only the read, an absent key adds a RESTORE,
// and an expired result or a takeover the claim script. Write first, every
// claim starts with RESTORE, and the script runs when the key exists.
func TestClaimEveryState(t *testing.T) {
	t.Parallel()
	for _, order := range claimOrders {
		t.Run(order.name, func(t *testing.T) {
			t.Parallel()
			testClaimEveryState(t, order.order, false)
		})
	}
	t.Run("write first, RESTORE refused", func(t *testing.T) {
		t.Parallel()
		testClaimEveryState(t, redisstore.ClaimWriteFirst, true)
	})
}

func testClaimEveryState(t *testing.T, order int, refused bool) {
	var s *redisstore.Store
	var c *goredis.Client
	if refused {
		c = restrictedClient(t)
		var err error
		if s, err = redisstore.New(c, redisstore.Config{Prefix: testPrefix(t)}); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
	} else {
		s, c, _ = newStore(t)
	}
	redisstore.ForceClaimOrder(s, order)
	ctx := t.Context()
	now := time.Now()
	resp := &retrysafe.Response{
		Status: http.StatusCreated,
		Header: http.Header{"X-Raw": {"caf\xe9 \x00", ""}, "content-type": {"application/json"}},
		Body:   []byte("{\"id\":1}\x00\xff"),
	}
	// "done": completed until now+1m; "busy": leased until now+1m;
	// "stale": lease ended at now-1s; "old": completed, expired at now-1s;
	// "empty": completed without a response; "nobody": completed with a
	// response without a body; "routed": claimed with a route.
	setup := []struct {
		key      string
		claimAt  time.Time
		lease    time.Duration
		complete bool
		ttl      time.Duration
		resp     *retrysafe.Response
	}{
		{"done", now, time.Minute, true, time.Minute, resp},
		{"busy", now, time.Minute, false, 0, nil},
		{"stale", now.Add(-time.Minute), time.Minute - time.Second, false, 0, nil},
		{"old", now.Add(-time.Minute), time.Minute, true, time.Minute - time.Second, resp},
		{"empty", now, time.Minute, true, time.Minute, nil},
		{"nobody", now, time.Minute, true, time.Minute, &retrysafe.Response{Status: 204, Header: http.Header{"A": {"b"}}}},
		{"routed", now, time.Minute, false, 0, nil},
	}
	tokens := map[string]string{}
	for _, r := range setup {
		p := claimParams("scope", r.key, r.claimAt, r.lease)
		if r.key == "routed" {
			p.Route = "POST /r"
		}
		if res, err := s.Claim(ctx, p); err != nil || !res.Claimed || res.Record.Attempt != 1 || !res.Record.CreatedAt.Equal(r.claimAt) {
			t.Fatalf("setup claim %s: %+v, %v", r.key, res, err)
		}
		tokens[r.key] = p.Token
		if r.complete {
			if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: r.key, Token: p.Token, Now: r.claimAt, TTL: r.ttl, Response: r.resp}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if redisstore.RestoreRefused(s) != refused {
		t.Fatalf("RESTORE refused: %v, want %v", redisstore.RestoreRefused(s), refused)
	}
	n := countCommands(c)
	for _, tc := range []struct {
		name, key, fp string
		claimed       bool
		state         retrysafe.State
		attempt       int
		resp          *retrysafe.Response
		route         string
		exists        bool // the key exists (a RESTORE finds it)
	}{
		{"replay", "done", "fp", false, retrysafe.StateCompleted, 1, resp, "", true},
		{"replay mismatch", "done", "other", false, retrysafe.StateCompleted, 1, resp, "", true},
		{"replay without response", "empty", "fp", false, retrysafe.StateCompleted, 1, nil, "", true},
		{"replay without body", "nobody", "fp", false, retrysafe.StateCompleted, 1, &retrysafe.Response{Status: 204, Header: http.Header{"A": {"b"}}}, "", true},
		{"in flight", "busy", "fp", false, retrysafe.StateProcessing, 1, nil, "", true},
		{"in flight mismatch", "busy", "other", false, retrysafe.StateProcessing, 1, nil, "", true},
		{"in flight with route", "routed", "fp", false, retrysafe.StateProcessing, 1, nil, "POST /r", true},
		{"expired lease mismatch", "stale", "other", false, retrysafe.StateProcessing, 1, nil, "", true},
		{"absent", "new", "fp", true, retrysafe.StateProcessing, 1, nil, "", false},
		{"expired result", "old", "fp", true, retrysafe.StateProcessing, 1, nil, "", true},
		{"takeover", "stale", "fp", true, retrysafe.StateProcessing, 2, nil, "", true},
	} {
		n.reset()
		p := claimParams("scope", tc.key, now, time.Minute)
		p.Fingerprint = tc.fp
		res, err := s.Claim(ctx, p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		rec := res.Record
		if res.Claimed != tc.claimed || rec.State != tc.state || rec.Attempt != tc.attempt || rec.Route != tc.route {
			t.Errorf("%s: claimed %v, state %s, attempt %d, route %q; want %v, %s, %d, %q", tc.name, res.Claimed, rec.State, rec.Attempt, rec.Route, tc.claimed, tc.state, tc.attempt, tc.route)
		}
		wantToken := tokens[tc.key]
		if tc.claimed {
			wantToken = p.Token
		}
		if rec.Token != wantToken || rec.Scope != "scope" || rec.Key != tc.key {
			t.Errorf("%s: record %+v, want token %s", tc.name, rec, wantToken)
		}
		if tc.claimed && (!rec.UpdatedAt.Equal(now) || !rec.LeaseUntil.Equal(now.Add(time.Minute)) || rec.Fingerprint != "fp") {
			t.Errorf("%s: claimed record %+v", tc.name, rec)
		}
		// The record as stored equals what Claim returned.
		got, err := s.Get(ctx, &retrysafe.GetParams{Scope: "scope", Key: tc.key, Now: now})
		if err != nil || !reflect.DeepEqual(got, rec) {
			t.Errorf("%s: Get = %+v, %v; Claim returned %+v", tc.name, got, err, rec)
		}
		// reads, restores, scripts
		var want [3]int64
		switch {
		case order == redisstore.ClaimReadFirst && !tc.claimed:
			want = [3]int64{1, 0, 0}
		case order == redisstore.ClaimReadFirst && !tc.exists:
			want = [3]int64{1, 1, 0}
		case order == redisstore.ClaimReadFirst:
			want = [3]int64{1, 0, 1}
		case refused:
			want = [3]int64{0, 0, 1}
		case !tc.exists:
			want = [3]int64{0, 1, 0}
		default:
			want = [3]int64{0, 1, 1}
		}
		cnt := n.counts()
		cnt[0]-- // the Get above
		if cnt != want {
			t.Errorf("%s: %d reads, %d RESTOREs, %d scripts; want %v", tc.name, cnt[0], cnt[1], cnt[2], want)
		}
		if tc.state == retrysafe.StateCompleted {
			got := rec.Response
			if tc.resp == nil {
				if got != nil {
					t.Errorf("%s: response %+v, want none", tc.name, got)
				}
			} else if got == nil || got.Status != tc.resp.Status || !reflect.DeepEqual(got.Header, tc.resp.Header) || !bytes.Equal(got.Body, tc.resp.Body) || (got.Body == nil) != (tc.resp.Body == nil) {
				t.Errorf("%s: response %+v, want %+v", tc.name, got, tc.resp)
			}
		}
	}
}

// TestClaimOrderAdapts: a store starts reading first; a run of new keys
// moves it to the write first (one RESTORE, no read, per new key), and a
// run of replays moves it back (one read, nothing else, per replay). Every
// answer stays right along the way.
func TestClaimOrderAdapts(t *testing.T) {
	t.Parallel()
	s, c, _ := newStore(t)
	ctx := t.Context()
	now := time.Now()
	n := countCommands(c)
	if !redisstore.ClaimReadsFirst(s) {
		t.Fatal("a new store writes first; want the plain read")
	}
	newKeys := 0
	for redisstore.ClaimReadsFirst(s) {
		if newKeys++; newKeys > 100 {
			t.Fatal("still reading first after 100 new keys")
		}
		p := claimParams("scope", fmt.Sprint("new-", newKeys), now, time.Minute)
		mustClaim(t, s, p)
		mustComplete(t, s, p, now, time.Minute)
	}
	t.Logf("write first after %d new keys", newKeys)
	// More new keys settle the estimate well below the threshold.
	for i := range 40 {
		n.reset()
		mustClaim(t, s, claimParams("scope", fmt.Sprint("more-", i), now, time.Minute))
		if got := n.counts(); got != [3]int64{0, 1, 0} {
			t.Fatalf("new key %d after the switch: %d reads, %d RESTOREs, %d scripts; want 0, 1, 0", i, got[0], got[1], got[2])
		}
	}
	replays := 0
	for !redisstore.ClaimReadsFirst(s) {
		if replays++; replays > 100 {
			t.Fatal("still writing first after 100 replays")
		}
		res, err := s.Claim(ctx, claimParams("scope", "new-1", now, time.Minute))
		if err != nil || res.Claimed || res.Record.State != retrysafe.StateCompleted {
			t.Fatalf("replay %d: %+v, %v", replays, res, err)
		}
	}
	t.Logf("read first again after %d replays", replays)
	n.reset()
	res, err := s.Claim(ctx, claimParams("scope", "new-2", now, time.Minute))
	if err != nil || res.Claimed || res.Record.State != retrysafe.StateCompleted {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	if got := n.counts(); got != [3]int64{1, 0, 0} {
		t.Fatalf("a replay after the switch back: %d reads, %d RESTOREs, %d scripts; want 1, 0, 0", got[0], got[1], got[2])
	}
}

// TestRestoreRecord: the record RESTORE writes for a new key is the one the
// claim script writes (a server that refuses RESTORE gets the script):
// the same fields and values, the same expiry and the same encoding, also
// for a key too long for a listpack and with a route.
func TestRestoreRecord(t *testing.T) {
	t.Parallel()
	prefix := testPrefix(t)
	admin := newClient(t)
	viaRestore, err := redisstore.New(newClient(t), redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer viaRestore.Close()
	viaScript, err := redisstore.New(restrictedClient(t), redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer viaScript.Close()
	ctx := t.Context()
	now := time.Now()
	for _, tc := range []struct{ name, scope, key, route string }{
		{"short", "scope", "k", ""},
		{"route", "tenant/ü", "order-17", "POST /orders"},
		{"long key", "scope", strings.Repeat("long-", 30), "PUT /x"},
		{"binary", "s\x00\xff", "k\r\n\x00", ""},
	} {
		type stored struct {
			fields   map[string]string
			pttl     time.Duration
			encoding string
		}
		var got [2]stored
		for i, s := range []*redisstore.Store{viaRestore, viaScript} {
			redisstore.ForceClaimOrder(s, redisstore.ClaimWriteFirst)
			p := &retrysafe.ClaimParams{Scope: tc.scope, Key: tc.key, Fingerprint: "fp-" + tc.name, Token: "token-" + tc.name,
				Now: now, Lease: time.Minute, Route: tc.route}
			if res, err := s.Claim(ctx, p); err != nil || !res.Claimed {
				t.Fatalf("%s: claim %d: %+v, %v", tc.name, i, res, err)
			}
			k := redisstore.RecordKey(s, tc.scope, tc.key)
			got[i] = stored{admin.HGetAll(ctx, k).Val(), admin.PTTL(ctx, k).Val().Round(time.Hour), admin.ObjectEncoding(ctx, k).Val()}
			if nonce := got[i].fields["nonce"]; len(nonce) != 16 {
				t.Errorf("%s: claim %d: nonce %q", tc.name, i, nonce)
			}
			delete(got[i].fields, "nonce") // one per call
			if err := admin.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if !redisstore.RestoreRefused(viaScript) || redisstore.RestoreRefused(viaRestore) {
			t.Fatal("the restricted user's store sent RESTORE, or the other one stopped")
		}
		if !reflect.DeepEqual(got[0], got[1]) {
			t.Errorf("%s: RESTORE wrote %+v, the script %+v", tc.name, got[0], got[1])
		}
	}
}

// TestRestoreRetried: when go-redis resends a RESTORE whose reply was lost
// (here: a hook sends it twice, and the second answers BUSYKEY), the claim
// script finds this call's token and nonce and the claim still wins, on
// both paths.
func TestRestoreRetried(t *testing.T) {
	t.Parallel()
	for _, order := range claimOrders {
		t.Run(order.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t)
			var twice atomic.Int64
			c.AddHook(resendRestore{&twice})
			s, err := redisstore.New(c, redisstore.Config{Prefix: testPrefix(t), DisableAutoPipeline: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			redisstore.ForceClaimOrder(s, order.order)
			now := time.Now()
			p := claimParams("scope", "k", now, time.Minute)
			res, err := s.Claim(t.Context(), p)
			if err != nil || !res.Claimed || res.Record.Token != p.Token || res.Record.Attempt != 1 {
				t.Fatalf("claim with a resent RESTORE: %+v, %v; want claimed, attempt 1", res, err)
			}
			if twice.Load() != 1 {
				t.Fatalf("%d RESTOREs resent, want 1", twice.Load())
			}
			// And the record is the claim's, ready for its Complete.
			mustComplete(t, s, p, now, time.Minute)
			// A second claim of the key with another token loses.
			if res, err := s.Claim(t.Context(), claimParams("scope", "k", now, time.Minute)); err != nil || res.Claimed {
				t.Fatalf("second claim: %+v, %v", res, err)
			}
		})
	}
}

// resendRestore is a goredis.Hook that sends every RESTORE twice and
// returns the second answer, as go-redis's retry after a lost reply would.
type resendRestore struct{ n *atomic.Int64 }

func (resendRestore) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r resendRestore) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if cmd.Name() != "restore" {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (resendRestore) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestClaimStaleRead: a record that changes between Claim's plain read and
// its script cannot make the claim win wrongly: the script decides on the
// record as it is then.
func TestClaimStaleRead(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		name string
		// before leaves the record the plain read sees (or nothing);
		// between changes it before the script runs.
		before  func(t *testing.T, other *redisstore.Store, key string) string
		between func(t *testing.T, other *redisstore.Store, key, token string)
		state   retrysafe.State
	}{
		{"absent, then claimed", nil,
			func(t *testing.T, other *redisstore.Store, key, _ string) {
				mustClaim(t, other, claimParams("scope", key, now, time.Minute))
			}, retrysafe.StateProcessing},
		{"absent, then completed", nil,
			func(t *testing.T, other *redisstore.Store, key, _ string) {
				p := claimParams("scope", key, now, time.Minute)
				mustClaim(t, other, p)
				mustComplete(t, other, p, now, time.Minute)
			}, retrysafe.StateCompleted},
		{"expired lease, then completed by its owner",
			func(t *testing.T, other *redisstore.Store, key string) string {
				p := claimParams("scope", key, now.Add(-time.Minute), time.Second)
				mustClaim(t, other, p)
				return p.Token
			},
			func(t *testing.T, other *redisstore.Store, key, token string) {
				mustComplete(t, other, &retrysafe.ClaimParams{Scope: "scope", Key: key, Token: token}, now, time.Minute)
			}, retrysafe.StateCompleted},
		{"expired lease, then taken over",
			func(t *testing.T, other *redisstore.Store, key string) string {
				mustClaim(t, other, claimParams("scope", key, now.Add(-time.Minute), time.Second))
				return ""
			},
			func(t *testing.T, other *redisstore.Store, key, _ string) {
				mustClaim(t, other, claimParams("scope", key, now, time.Minute))
			}, retrysafe.StateProcessing},
		{"expired result, then claimed again",
			func(t *testing.T, other *redisstore.Store, key string) string {
				p := claimParams("scope", key, now.Add(-time.Minute), time.Minute)
				mustClaim(t, other, p)
				mustComplete(t, other, p, now.Add(-time.Minute), time.Second)
				return ""
			},
			func(t *testing.T, other *redisstore.Store, key, _ string) {
				mustClaim(t, other, claimParams("scope", key, now, time.Minute))
			}, retrysafe.StateProcessing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _, prefix := newStore(t)
			redisstore.ForceClaimOrder(s, redisstore.ClaimReadFirst) // the window is on this path
			other, err := redisstore.New(newClient(t), redisstore.Config{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			const key = "k"
			var token string
			if tc.before != nil {
				token = tc.before(t, other, key)
			}
			calls := 0
			redisstore.SetAfterRead(s, func() {
				calls++
				tc.between(t, other, key, token)
			})
			res, err := s.Claim(t.Context(), claimParams("scope", key, now, time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if calls != 1 {
				t.Fatalf("the window between read and script was entered %d times, want 1", calls)
			}
			if res.Claimed || res.Record.State != tc.state {
				t.Fatalf("claim after a stale read: claimed %v, state %s; want not claimed, %s", res.Claimed, res.Record.State, tc.state)
			}
			got, err := s.Get(t.Context(), &retrysafe.GetParams{Scope: "scope", Key: key, Now: now})
			if err != nil || got.Token != res.Record.Token || got.State != tc.state {
				t.Fatalf("record after the claim: %+v, %v; want the blocking one %+v", got, err, res.Record)
			}
		})
	}
}

// TestClaimReadRacesCompletion overlaps, on each of Claim's paths, many claims of keys whose lease has
// run out (so every plain read may lead to a takeover) with the owner's
// Complete: either the owner completes and nobody takes over, or exactly
// one claimant takes over and the owner is fenced.
func TestClaimReadRacesCompletion(t *testing.T) {
	t.Parallel()
	for _, order := range claimOrders {
		t.Run(order.name, func(t *testing.T) {
			t.Parallel()
			testClaimRacesCompletion(t, order.order)
		})
	}
}

func testClaimRacesCompletion(t *testing.T, order int) {
	s, _, prefix := newStore(t, func(o *goredis.Options) { o.PoolSize = 16 })
	redisstore.ForceClaimOrder(s, order)
	owner, err := redisstore.New(newClient(t), redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	ctx := t.Context()
	now := time.Now()
	const keys, claimants = 40, 8
	completed, takenOver := 0, 0
	for i := range keys {
		key := fmt.Sprint("k", i)
		p := claimParams("scope", key, now.Add(-time.Minute), time.Second)
		mustClaim(t, owner, p)
		var claimed atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		var completeErr error
		// On odd keys the owner completes only after a claim returned, so
		// that both outcomes occur; on even keys they all race.
		firstClaim := make(chan struct{})
		var once sync.Once
		wg.Go(func() {
			<-start
			if i%2 == 1 {
				<-firstClaim
			}
			completeErr = owner.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: key, Token: p.Token, Now: now, TTL: time.Minute, Response: &retrysafe.Response{Status: 200}})
		})
		for range claimants {
			wg.Go(func() {
				<-start
				res, err := s.Claim(ctx, claimParams("scope", key, now, time.Minute))
				once.Do(func() { close(firstClaim) })
				if err != nil {
					t.Error(err)
					return
				}
				if res.Claimed {
					claimed.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		switch {
		case completeErr == nil && claimed.Load() == 0:
			completed++
		case errors.Is(completeErr, retrysafe.ErrLeaseLost) && claimed.Load() == 1:
			takenOver++
		default:
			t.Fatalf("%s: Complete: %v, %d claims won; want (nil, 0) or (ErrLeaseLost, 1)", key, completeErr, claimed.Load())
		}
	}
	t.Logf("%d keys completed by their owner, %d taken over", completed, takenOver)
}

func mustClaim(t *testing.T, s *redisstore.Store, p *retrysafe.ClaimParams) {
	t.Helper()
	if res, err := s.Claim(t.Context(), p); err != nil || !res.Claimed {
		t.Fatalf("claim %s: %+v, %v", p.Key, res, err)
	}
}

func mustComplete(t *testing.T, s *redisstore.Store, p *retrysafe.ClaimParams, now time.Time, ttl time.Duration) {
	t.Helper()
	if err := s.Complete(t.Context(), &retrysafe.CompleteParams{Scope: "scope", Key: p.Key, Token: p.Token, Now: now, TTL: ttl, Response: &retrysafe.Response{Status: 200}}); err != nil {
		t.Fatalf("complete %s: %v", p.Key, err)
	}
}
