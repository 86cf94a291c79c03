package redis_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

// binaryData returns n bytes that use every byte value.
func binaryData(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/256)
	}
	return b
}

func mustGet(t *testing.T, s *redisstore.Store, key string, now time.Time) *retrysafe.Record {
	t.Helper()
	rec, err := s.Get(t.Context(), &retrysafe.GetParams{Scope: "scope", Key: key, Now: now})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return rec
}

// cpString describes cp briefly (its data may be 64 KiB).
func cpString(cp *retrysafe.Checkpoint) string {
	if cp == nil {
		return "none"
	}
	return fmt.Sprintf("%q at %v with %d bytes", cp.Name, cp.At, len(cp.Data))
}

func sameCheckpoint(a, b *retrysafe.Checkpoint) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Name == b.Name && a.At.Equal(b.At) && bytes.Equal(a.Data, b.Data) && (a.Data == nil) == (b.Data == nil)
}

// TestExtendAbandonAndCheckpoint: Extend with Abandon marks the record
// abandoned and leaves its lease and its Redis expiry alone; with a
// Checkpoint it stores it (At = Now, CheckpointStoreLimit bytes of every
// value) and renews the lease; a wrong token changes nothing; Complete
// drops the abandoned mark and keeps the checkpoint.
func TestExtendAbandonAndCheckpoint(t *testing.T) {
	t.Parallel()
	s, c, _ := newStore(t)
	ctx := t.Context()
	now := time.Now()
	p := claimParams("scope", "k", now, time.Minute)
	mustClaim(t, s, p)
	ext := func(at time.Time, token string, abandon bool, cp *retrysafe.Checkpoint) error {
		return s.Extend(ctx, &retrysafe.ExtendParams{Scope: "scope", Key: "k", Token: token, Now: at, Lease: time.Hour, Abandon: abandon, Checkpoint: cp})
	}

	t1 := now.Add(time.Second)
	big := &retrysafe.Checkpoint{Name: "charge requested", Data: binaryData(retrysafe.CheckpointStoreLimit), At: now.Add(-time.Hour)}
	if err := ext(t1, p.Token, false, big); err != nil {
		t.Fatal(err)
	}
	big.Data[0]++ // the store keeps its own copy
	rec := mustGet(t, s, "k", t1)
	big.Data[0]--
	want := &retrysafe.Checkpoint{Name: "charge requested", Data: big.Data, At: t1}
	if !sameCheckpoint(rec.Checkpoint, want) || rec.Abandoned || !rec.LeaseUntil.Equal(t1.Add(time.Hour)) {
		t.Fatalf("after a checkpoint: abandoned %v, lease until %v, checkpoint %s", rec.Abandoned, rec.LeaseUntil, cpString(rec.Checkpoint))
	}

	// Another token: lease lost, nothing written.
	if err := ext(t1.Add(time.Second), "not-the-owner", true, &retrysafe.Checkpoint{Name: "other"}); !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("extend with another token: %v, want ErrLeaseLost", err)
	}
	if got := mustGet(t, s, "k", t1); !reflect.DeepEqual(got, rec) {
		t.Fatalf("a fenced-off extend changed the record: %+v, was %+v", got, rec)
	}

	// Abandon: lease and key expiry unchanged.
	pttl := c.PTTL(ctx, redisstore.RecordKey(s, "scope", "k")).Val()
	t2 := t1.Add(2 * time.Second)
	if err := ext(t2, p.Token, true, nil); err != nil {
		t.Fatal(err)
	}
	rec = mustGet(t, s, "k", t2)
	if !rec.Abandoned || !rec.LeaseUntil.Equal(t1.Add(time.Hour)) || !sameCheckpoint(rec.Checkpoint, want) {
		t.Fatalf("after abandon: abandoned %v, lease until %v (want %v), checkpoint kept %v", rec.Abandoned, rec.LeaseUntil, t1.Add(time.Hour), sameCheckpoint(rec.Checkpoint, want))
	}
	if got := c.PTTL(ctx, redisstore.RecordKey(s, "scope", "k")).Val(); got > pttl {
		t.Fatalf("abandon moved the key's expiry: PTTL %v, was %v", got, pttl)
	}
	if st := admin.StatusOf(rec, t2); st != admin.StatusUnknown {
		t.Fatalf("status of an abandoned record in its lease: %s, want unknown", st)
	}

	// A checkpoint replaces the last one; nil data reads back nil, empty
	// data empty. Abandon with a checkpoint keeps the lease too.
	for _, data := range [][]byte{nil, {}} {
		t3 := t2.Add(time.Second)
		if err := ext(t3, p.Token, true, &retrysafe.Checkpoint{Name: "step 2", Data: data}); err != nil {
			t.Fatal(err)
		}
		rec = mustGet(t, s, "k", t3)
		if w := (&retrysafe.Checkpoint{Name: "step 2", Data: data, At: t3}); !sameCheckpoint(rec.Checkpoint, w) || !rec.Abandoned || !rec.LeaseUntil.Equal(t1.Add(time.Hour)) {
			t.Fatalf("abandon with checkpoint (data %#v): %+v, checkpoint %+v", data, rec, rec.Checkpoint)
		}
	}

	// Complete: the outcome is known, the checkpoint stays.
	cp := rec.Checkpoint
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: "k", Token: p.Token, Now: t2, TTL: time.Minute, Response: &retrysafe.Response{Status: 201}}); err != nil {
		t.Fatal(err)
	}
	rec = mustGet(t, s, "k", t2)
	if rec.Abandoned || !sameCheckpoint(rec.Checkpoint, cp) || rec.State != retrysafe.StateCompleted {
		t.Fatalf("after complete: state %s, abandoned %v, checkpoint %+v (want %+v)", rec.State, rec.Abandoned, rec.Checkpoint, cp)
	}
	// And the replay (the plain read) returns it.
	res, err := s.Claim(ctx, claimParams("scope", "k", t2, time.Minute))
	if err != nil || res.Claimed || !reflect.DeepEqual(res.Record, rec) {
		t.Fatalf("replay: %+v, %v; want %+v", res, err, rec)
	}
}

// TestClaimTakeoverPolicies: an abandoned record in its lease is answered
// from the plain read, like any in-flight one. On a processing record whose
// lease ran out, NoTakeover and a TakeoverToken of another attempt leave
// the record as it is (answered from the plain read, no script); the right
// TakeoverToken takes it over, keeps the checkpoint (also in the returned
// record) and drops the abandoned mark. Absent keys and expired results
// are claimed whatever the policy says, without a checkpoint.
func TestClaimTakeoverPolicies(t *testing.T) {
	t.Parallel()
	s, c, _ := newStore(t)
	ctx := t.Context()
	now := time.Now()
	cp := &retrysafe.Checkpoint{Name: "charge requested", Data: []byte("ch_1\x00\xff")}
	// "stale": an abandoned attempt with a checkpoint whose lease ran out.
	stale := claimParams("scope", "stale", now.Add(-time.Minute), time.Minute)
	mustClaim(t, s, stale)
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: "scope", Key: "stale", Token: stale.Token, Now: now.Add(-time.Minute), Lease: 30 * time.Second, Checkpoint: cp}); err != nil {
		t.Fatal(err)
	}
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: "scope", Key: "stale", Token: stale.Token, Now: now.Add(-40 * time.Second), Abandon: true}); err != nil {
		t.Fatal(err)
	}
	before := mustGet(t, s, "stale", now)
	if !before.Abandoned || before.Checkpoint == nil || !before.LeaseExpired(now) {
		t.Fatalf("setup: %+v", before)
	}
	// "old": a completed record with a checkpoint whose result expired.
	old := claimParams("scope", "old", now.Add(-time.Minute), time.Minute)
	mustClaim(t, s, old)
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: "scope", Key: "old", Token: old.Token, Now: now.Add(-time.Minute), Lease: time.Minute, Checkpoint: cp}); err != nil {
		t.Fatal(err)
	}
	mustComplete(t, s, old, now.Add(-time.Minute), time.Second)

	// "gaveup": abandoned in its lease.
	gaveup := claimParams("scope", "gaveup", now, time.Minute)
	mustClaim(t, s, gaveup)
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: "scope", Key: "gaveup", Token: gaveup.Token, Now: now, Abandon: true}); err != nil {
		t.Fatal(err)
	}

	n := countCommands(c)
	res, err := s.Claim(ctx, claimParams("scope", "gaveup", now, time.Minute))
	if err != nil || res.Claimed || !res.Record.Abandoned || res.Record.Token != gaveup.Token {
		t.Fatalf("claim of an abandoned record in its lease: %+v, %v; want it unclaimed, abandoned", res, err)
	}
	if cnt := n.counts(); cnt != [2]int64{1, 0} {
		t.Errorf("claim of an abandoned record in its lease: %d reads, %d scripts; want the plain read only", cnt[0], cnt[1])
	}
	for _, tc := range []struct {
		name       string
		noTakeover bool
		token      string
	}{
		{"no takeover", true, ""},
		{"takeover token of another attempt", false, "another"},
		{"no takeover wins over the right token", true, stale.Token},
	} {
		n.reset()
		p := claimParams("scope", "stale", now, time.Minute)
		p.NoTakeover, p.TakeoverToken = tc.noTakeover, tc.token
		res, err := s.Claim(ctx, p)
		if err != nil || res.Claimed || !reflect.DeepEqual(res.Record, before) {
			t.Fatalf("%s: %+v, %v; want the record unclaimed and unchanged %+v", tc.name, res, err, before)
		}
		if cnt := n.counts(); cnt != [2]int64{1, 0} {
			t.Errorf("%s: %d reads, %d scripts; want the plain read only", tc.name, cnt[0], cnt[1])
		}
		if got := mustGet(t, s, "stale", now); !reflect.DeepEqual(got, before) {
			t.Fatalf("%s: the record changed: %+v", tc.name, got)
		}
	}

	p := claimParams("scope", "stale", now, time.Minute)
	p.TakeoverToken = stale.Token
	res, err = s.Claim(ctx, p)
	if err != nil || !res.Claimed {
		t.Fatalf("takeover with the record's token: %+v, %v", res, err)
	}
	wantCP := &retrysafe.Checkpoint{Name: cp.Name, Data: cp.Data, At: exact(now.Add(-time.Minute))}
	if rec := res.Record; rec.Attempt != 2 || rec.Abandoned || !sameCheckpoint(rec.Checkpoint, wantCP) || !rec.CreatedAt.Equal(before.CreatedAt) || rec.Token != p.Token {
		t.Fatalf("takeover returned %+v, checkpoint %+v; want attempt 2, not abandoned, checkpoint %+v", rec, rec.Checkpoint, wantCP)
	}
	if got := mustGet(t, s, "stale", now); !reflect.DeepEqual(got, res.Record) {
		t.Fatalf("after the takeover Get = %+v, Claim returned %+v", got, res.Record)
	}

	for _, key := range []string{"absent", "old"} {
		p := claimParams("scope", key, now, time.Minute)
		p.NoTakeover, p.TakeoverToken = true, "whatever"
		res, err := s.Claim(ctx, p)
		if err != nil || !res.Claimed || res.Record.Attempt != 1 || res.Record.Checkpoint != nil {
			t.Fatalf("%s with NoTakeover: %+v, %v; want claimed, attempt 1, no checkpoint", key, res, err)
		}
		if got := mustGet(t, s, key, now); got.Checkpoint != nil || got.Abandoned {
			t.Fatalf("%s: stored %+v, checkpoint %+v", key, got, got.Checkpoint)
		}
	}
}

// exact drops what the store cannot keep of t (monotonic reading,
// location).
func exact(t time.Time) time.Time { return time.Unix(0, t.UnixNano()).UTC() }

// TestClaimPoliciesInScript: the claim script itself honours NoTakeover
// and TakeoverToken when the record changed after the plain read (which
// saw nothing to block on).
func TestClaimPoliciesInScript(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		name string
		// before leaves the record the plain read sees (or nothing) and
		// returns its token; between changes it before the script runs and
		// returns the new token.
		before     func(t *testing.T, other *redisstore.Store) string
		between    func(t *testing.T, other *redisstore.Store) string
		noTakeover bool
		// token: "before", "between" or another value.
		token   string
		claimed bool
	}{
		{"absent, then an expired lease: no takeover", nil, expiredClaim, true, "", false},
		{"absent, then an expired lease: token of another attempt", nil, expiredClaim, false, "another", false},
		{"absent, then an expired lease: its token", nil, expiredClaim, false, "between", true},
		{"expired lease, then taken over by another (lease expired again)", expiredClaim, retakenClaim, false, "before", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _, prefix := newStore(t)
			other, err := redisstore.New(newClient(t), redisstore.Config{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			tokens := map[string]string{}
			if tc.before != nil {
				tokens["before"] = tc.before(t, other)
			}
			p := claimParams("scope", "k", now, time.Minute)
			p.NoTakeover = tc.noTakeover
			p.TakeoverToken = tc.token
			if tc.token == "before" {
				p.TakeoverToken = tokens["before"]
			}
			redisstore.SetAfterRead(s, func() {
				tokens["between"] = tc.between(t, other)
				if tc.token == "between" {
					// Claim builds the script's arguments after this
					// window, and the plain read saw no record.
					p.TakeoverToken = tokens["between"]
				}
			})
			res, err := s.Claim(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			if res.Claimed != tc.claimed {
				t.Fatalf("claimed %v, want %v (record %+v)", res.Claimed, tc.claimed, res.Record)
			}
			got := mustGet(t, s, "k", now)
			switch {
			case tc.claimed && (got.Token != p.Token || got.Attempt != 2 || got.Checkpoint == nil || got.Checkpoint.Name != "step"):
				t.Fatalf("after the takeover: %+v", got)
			case !tc.claimed && (got.Token != tokens["between"] || !reflect.DeepEqual(got, res.Record)):
				t.Fatalf("unclaimed, but the record is %+v; Claim returned %+v", got, res.Record)
			}
		})
	}
}

// expiredClaim claims "k" a minute ago with a lease that has run out and
// records a checkpoint; it returns the token.
func expiredClaim(t *testing.T, other *redisstore.Store) string {
	return claimExpiredAt(t, other, time.Now().Add(-time.Minute))
}

// retakenClaim takes over expiredClaim's record, with a lease that ran
// out too.
func retakenClaim(t *testing.T, other *redisstore.Store) string {
	return claimExpiredAt(t, other, time.Now().Add(-10*time.Second))
}

func claimExpiredAt(t *testing.T, other *redisstore.Store, at time.Time) string {
	t.Helper()
	p := claimParams("scope", "k", at, time.Second)
	mustClaim(t, other, p)
	if err := other.Extend(t.Context(), &retrysafe.ExtendParams{Scope: "scope", Key: "k", Token: p.Token, Now: p.Now, Lease: time.Second, Checkpoint: &retrysafe.Checkpoint{Name: "step"}}); err != nil {
		t.Fatal(err)
	}
	return p.Token
}

// TestRetriedTakeoverKeepsCheckpoint: when go-redis resends a takeover
// (with a TakeoverToken) whose first run took the record over, the retry
// recognises itself although the record's token is now its own: Claimed,
// attempt 2, the checkpoint.
func TestRetriedTakeoverKeepsCheckpoint(t *testing.T) {
	t.Parallel()
	c := newClient(t, func(o *goredis.Options) { o.MaxRetries = 2 })
	var armed atomic.Bool
	c.AddHook(replyLoser{&armed})
	s, err := redisstore.New(c, redisstore.Config{Prefix: testPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	first := claimParams("scope", "k", now.Add(-time.Minute), time.Second)
	mustClaim(t, s, first)
	cp := &retrysafe.Checkpoint{Name: "n", Data: []byte("d")}
	if err := s.Extend(t.Context(), &retrysafe.ExtendParams{Scope: "scope", Key: "k", Token: first.Token, Now: first.Now, Lease: time.Second, Checkpoint: cp}); err != nil {
		t.Fatal(err)
	}
	p := claimParams("scope", "k", now, time.Minute)
	p.TakeoverToken = first.Token
	armed.Store(true)
	res, err := s.Claim(t.Context(), p)
	if err != nil || !res.Claimed || res.Record.Attempt != 2 || res.Record.Token != p.Token {
		t.Fatalf("takeover whose reply was lost once: %+v, %v", res, err)
	}
	if want := (&retrysafe.Checkpoint{Name: "n", Data: []byte("d"), At: exact(first.Now)}); !sameCheckpoint(res.Record.Checkpoint, want) {
		t.Fatalf("checkpoint %+v, want %+v", res.Record.Checkpoint, want)
	}
}

// TestAdminUnknown: List, Find and Stats return the abandoned mark and the
// checkpoint (its data too, without bodies); Stats counts an abandoned
// record in its lease as an unknown outcome.
func TestAdminUnknown(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := t.Context()
	now := time.Now()
	p := claimParams("scope", "abandoned", now, time.Minute)
	mustClaim(t, s, p)
	cp := &retrysafe.Checkpoint{Name: "n", Data: []byte("ref-1")}
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: "scope", Key: "abandoned", Token: p.Token, Now: now, Abandon: true, Checkpoint: cp}); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, claimParams("scope", "busy", now, time.Minute))
	want := mustGet(t, s, "abandoned", now)
	if !want.Abandoned || want.Checkpoint == nil {
		t.Fatalf("setup: %+v", want)
	}

	list, err := s.List(ctx, &admin.ListParams{})
	if err != nil || len(list) != 2 || !reflect.DeepEqual(list[0], want) || list[1].Abandoned || list[1].Checkpoint != nil {
		t.Fatalf("List: %+v, %v; want [%+v, busy]", list, err, want)
	}
	found, err := s.Find(ctx, &admin.FindParams{Key: "abandoned"})
	if err != nil || len(found) != 1 || !reflect.DeepEqual(found[0], want) {
		t.Fatalf("Find: %+v, %v", found, err)
	}
	found, err = s.Find(ctx, &admin.FindParams{Key: "abandoned", Scope: "scope", ScopeSet: true})
	if err != nil || len(found) != 1 || !reflect.DeepEqual(found[0], want) {
		t.Fatalf("Find in a scope: %+v, %v", found, err)
	}
	st, err := s.Stats(ctx, &admin.StatsParams{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if st.Processing != 2 || len(st.Unknown) != 1 || !reflect.DeepEqual(st.Unknown[0], want) || st.OldestInFlight == nil || st.OldestInFlight.Key != "busy" {
		t.Fatalf("Stats: %+v; want 2 processing, the abandoned one unknown, busy in flight", st)
	}
}
