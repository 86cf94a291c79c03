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

// scriptCounter counts the script commands (EVAL, EVALSHA) a client sends.
func scriptCounter(c *goredis.Client) *atomic.Int64 {
	var n atomic.Int64
	c.AddHook(recorder{func(name string, _ error) {
		if strings.HasPrefix(name, "eval") {
			n.Add(1)
		}
	}})
	return &n
}

// TestClaimPlainRead: a claim that a record blocks (a replay, an in-flight
// duplicate, a mismatch on an expired lease) runs no script and returns the
// record as stored, response byte for byte; a claim that may write (absent,
// expired result, takeover) runs the claim script.
func TestClaimPlainRead(t *testing.T) {
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
	// "stale": lease ended at now-1s; "old": completed, expired at now-1s.
	setup := []struct {
		key      string
		claimAt  time.Time
		lease    time.Duration
		complete bool
		ttl      time.Duration
	}{
		{"done", now, time.Minute, true, time.Minute},
		{"busy", now, time.Minute, false, 0},
		{"stale", now.Add(-time.Minute), time.Minute - time.Second, false, 0},
		{"old", now.Add(-time.Minute), time.Minute, true, time.Minute - time.Second},
	}
	for _, r := range setup {
		p := claimParams("scope", r.key, r.claimAt, r.lease)
		if res, err := s.Claim(ctx, p); err != nil || !res.Claimed {
			t.Fatalf("setup claim %s: %+v, %v", r.key, res, err)
		}
		if r.complete {
			if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: r.key, Token: p.Token, Now: r.claimAt, TTL: r.ttl, Response: resp}); err != nil {
				t.Fatal(err)
			}
		}
	}
	evals := scriptCounter(c)
	for _, tc := range []struct {
		name, key, fp string
		claimed       bool
		state         retrysafe.State
		scripts       int64
	}{
		{"replay", "done", "fp", false, retrysafe.StateCompleted, 0},
		{"replay mismatch", "done", "other", false, retrysafe.StateCompleted, 0},
		{"in flight", "busy", "fp", false, retrysafe.StateProcessing, 0},
		{"in flight mismatch", "busy", "other", false, retrysafe.StateProcessing, 0},
		{"expired lease mismatch", "stale", "other", false, retrysafe.StateProcessing, 0},
		{"absent", "new", "fp", true, retrysafe.StateProcessing, 1},
		{"expired result", "old", "fp", true, retrysafe.StateProcessing, 1},
		{"takeover", "stale", "fp", true, retrysafe.StateProcessing, 1},
	} {
		evals.Store(0)
		p := claimParams("scope", tc.key, now, time.Minute)
		p.Fingerprint = tc.fp
		res, err := s.Claim(ctx, p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if res.Claimed != tc.claimed || res.Record.State != tc.state {
			t.Errorf("%s: claimed %v, state %s; want %v, %s", tc.name, res.Claimed, res.Record.State, tc.claimed, tc.state)
		}
		if got := evals.Load(); got != tc.scripts {
			t.Errorf("%s: %d script commands, want %d", tc.name, got, tc.scripts)
		}
		if tc.state == retrysafe.StateCompleted {
			got := res.Record.Response
			if got == nil || got.Status != resp.Status || !reflect.DeepEqual(got.Header, resp.Header) || !bytes.Equal(got.Body, resp.Body) {
				t.Errorf("%s: response %+v, want %+v", tc.name, got, resp)
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

// TestClaimReadRacesCompletion overlaps many claims of keys whose lease has
// run out (so every plain read may lead to a takeover) with the owner's
// Complete: either the owner completes and nobody takes over, or exactly
// one claimant takes over and the owner is fenced.
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
