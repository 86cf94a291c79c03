package redis_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

// rawListener subscribes to a record's channel directly (not through
// Subscribe, so it marks nothing) and returns its messages.
func rawListener(t *testing.T, c *goredis.Client, channel string) <-chan *goredis.Message {
	t.Helper()
	ps := c.Subscribe(t.Context(), channel)
	t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(t.Context()); err != nil { // the confirmation
		t.Fatal(err)
	}
	return ps.Channel()
}

func completeParams(p *retrysafe.ClaimParams) *retrysafe.CompleteParams {
	return &retrysafe.CompleteParams{Scope: p.Scope, Key: p.Key, Token: p.Token, Now: p.Now, TTL: time.Minute,
		Response: &retrysafe.Response{Status: http.StatusCreated, Body: []byte("done")}}
}

// TestPublishOnlyWhenWaited: Complete publishes on the record's channel
// only when a waiter marked the record with Subscribe; Release always
// publishes.
func TestPublishOnlyWhenWaited(t *testing.T) {
	t.Parallel()
	s, c, _ := newStore(t)
	ctx := t.Context()
	now := time.Now()

	// Nobody subscribed through the store: no PUBLISH.
	quiet := claimParams("scope", "quiet", now, time.Minute)
	if _, err := s.Claim(ctx, quiet); err != nil {
		t.Fatal(err)
	}
	msgs := rawListener(t, c, redisstore.RecordKey(s, "scope", "quiet"))
	if err := s.Complete(ctx, completeParams(quiet)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		t.Fatalf("completion of an unmarked record published %q", m.Payload)
	case <-time.After(200 * time.Millisecond):
	}

	// A waiter marked it: published.
	waited := claimParams("scope", "waited", now, time.Minute)
	if _, err := s.Claim(ctx, waited); err != nil {
		t.Fatal(err)
	}
	msgs = rawListener(t, c, redisstore.RecordKey(s, "scope", "waited"))
	ch, unsubscribe, err := s.Subscribe(ctx, "scope", "waited")
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()
	select {
	case <-ch:
		t.Fatal("value before the completion of a processing record")
	default:
	}
	if err := s.Complete(ctx, completeParams(waited)); err != nil {
		t.Fatal(err)
	}
	for _, wait := range []func() bool{
		func() bool { m := <-msgs; return m.Payload == "completed" },
		func() bool { <-ch; return true },
	} {
		done := make(chan bool, 1)
		go func() { done <- wait() }()
		select {
		case ok := <-done:
			if !ok {
				t.Fatal("wrong payload")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no notification of a marked record's completion")
		}
	}

	// Release publishes without a mark.
	released := claimParams("scope", "released", now, time.Minute)
	if _, err := s.Claim(ctx, released); err != nil {
		t.Fatal(err)
	}
	msgs = rawListener(t, c, redisstore.RecordKey(s, "scope", "released"))
	if err := s.Release(ctx, &retrysafe.ReleaseParams{Scope: "scope", Key: "released", Token: released.Token}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-msgs:
	case <-time.After(5 * time.Second):
		t.Fatal("no notification of a release")
	}
}

// TestSubscribeAfterChange: a waiter that subscribes after the record was
// completed or released (between its read and its Subscribe) gets a value
// at once, without a PUBLISH, so it re-reads instead of waiting for its
// poll.
func TestSubscribeAfterChange(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := t.Context()
	now := time.Now()
	for _, tc := range []struct {
		key    string
		change func(p *retrysafe.ClaimParams) error
	}{
		{"completed", func(p *retrysafe.ClaimParams) error { return s.Complete(ctx, completeParams(p)) }},
		{"released", func(p *retrysafe.ClaimParams) error {
			return s.Release(ctx, &retrysafe.ReleaseParams{Scope: p.Scope, Key: p.Key, Token: p.Token})
		}},
		{"never-claimed", func(*retrysafe.ClaimParams) error { return nil }},
	} {
		p := claimParams("scope", tc.key, now, time.Minute)
		if tc.key != "never-claimed" {
			if _, err := s.Claim(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		if err := tc.change(p); err != nil {
			t.Fatal(err)
		}
		ch, unsubscribe, err := s.Subscribe(ctx, "scope", tc.key)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(time.Second):
			t.Errorf("%s: no value from a subscription that came after the change", tc.key)
		}
		unsubscribe()
	}
}

// TestSubscribeRacesComplete: whether Complete runs before, during or
// after Subscribe, the waiter gets a value soon, never only through its
// poll (the mark is set after SUBSCRIBE, and a record already completed
// wakes the waiter itself).
func TestSubscribeRacesComplete(t *testing.T) {
	t.Parallel()
	s, _, prefix := newStore(t)
	other, err := redisstore.New(newClient(t), redisstore.Config{Prefix: prefix}) // another gateway
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := t.Context()
	now := time.Now()
	for i := range 200 {
		key := fmt.Sprint("race-", i)
		p := claimParams("scope", key, now, time.Minute)
		if _, err := s.Claim(ctx, p); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- s.Complete(ctx, completeParams(p)) }()
		ch, unsubscribe, err := other.Subscribe(ctx, "scope", key)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: no value within 2s", key)
		}
		unsubscribe()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// TestTakeoverKeepsMark: a waiter marked the record of an owner whose
// lease then ran out; the completion by the next attempt, which took the
// record over with the claim script, is published to it.
func TestTakeoverKeepsMark(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := t.Context()
	now := time.Now()
	first := claimParams("scope", "k", now, time.Second)
	if _, err := s.Claim(ctx, first); err != nil {
		t.Fatal(err)
	}
	ch, unsubscribe, err := s.Subscribe(ctx, "scope", "k")
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()
	second := claimParams("scope", "k", now.Add(2*time.Second), time.Minute)
	res, err := s.Claim(ctx, second)
	if err != nil || !res.Claimed || res.Record.Attempt != 2 {
		t.Fatalf("takeover: %+v, %v", res, err)
	}
	select {
	case <-ch:
		t.Fatal("value before the completion")
	default:
	}
	if err := s.Complete(ctx, completeParams(second)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("the completion of the takeover was not published to the waiter of the record it replaced")
	}
}
