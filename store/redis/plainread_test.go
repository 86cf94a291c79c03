package redis_test

import (
	"bytes"
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

// commandCounts counts the script commands (EVAL, EVALSHA) and the plain
// reads (HGETALL) a client sends.
type commandCounts struct{ scripts, reads atomic.Int64 }

func countCommands(c *goredis.Client) *commandCounts {
	var n commandCounts
	c.AddHook(recorder{func(name string, _ error) {
		switch {
		case strings.HasPrefix(name, "eval"):
			n.scripts.Add(1)
		case name == "hgetall":
			n.reads.Add(1)
		}
	}})
	return &n
}

func (n *commandCounts) reset() { n.scripts.Store(0); n.reads.Store(0) }

// counts returns (reads, scripts).
func (n *commandCounts) counts() [2]int64 { return [2]int64{n.reads.Load(), n.scripts.Load()} }

// TestClaimEveryState claims a record in every state: the answer is the
// record as stored (response byte for byte). A claim that a record blocks
// (a replay, an in-flight duplicate, a mismatch on an expired lease) sends
// only the plain read; an absent key, an expired result or a takeover adds
// the claim script.
func TestClaimEveryState(t *testing.T) {
	t.Parallel()
	s, c, _ := newStore(t)
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
	n := countCommands(c)
	for _, tc := range []struct {
		name, key, fp string
		claimed       bool
		state         retrysafe.State
		attempt       int
		resp          *retrysafe.Response
		route         string
	}{
		{"replay", "done", "fp", false, retrysafe.StateCompleted, 1, resp, ""},
		{"replay mismatch", "done", "other", false, retrysafe.StateCompleted, 1, resp, ""},
		{"replay without response", "empty", "fp", false, retrysafe.StateCompleted, 1, nil, ""},
		{"replay without body", "nobody", "fp", false, retrysafe.StateCompleted, 1, &retrysafe.Response{Status: 204, Header: http.Header{"A": {"b"}}}, ""},
		{"in flight", "busy", "fp", false, retrysafe.StateProcessing, 1, nil, ""},
		{"in flight mismatch", "busy", "other", false, retrysafe.StateProcessing, 1, nil, ""},
		{"in flight with route", "routed", "fp", false, retrysafe.StateProcessing, 1, nil, "POST /r"},
		{"expired lease mismatch", "stale", "other", false, retrysafe.StateProcessing, 1, nil, ""},
		{"absent", "new", "fp", true, retrysafe.StateProcessing, 1, nil, ""},
		{"expired result", "old", "fp", true, retrysafe.StateProcessing, 1, nil, ""},
		{"takeover", "stale", "fp", true, retrysafe.StateProcessing, 2, nil, ""},
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
		// reads, scripts
		want := [2]int64{1, 1}
		if !tc.claimed {
			want = [2]int64{1, 0}
		}
		cnt := n.counts()
		cnt[0]-- // the Get above
		if cnt != want {
			t.Errorf("%s: %d reads, %d scripts; want %v", tc.name, cnt[0], cnt[1], want)
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

// TestClaimReadRacesCompletion overlaps many claims of keys whose lease
// has run out (so every plain read may lead to a takeover) with the
// owner's Complete: either the owner completes and nobody takes over, or
// exactly one claimant takes over and the owner is fenced.
func TestClaimReadRacesCompletion(t *testing.T) {
	t.Parallel()
	s, _, prefix := newStore(t, func(o *goredis.Options) { o.PoolSize = 16 })
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
