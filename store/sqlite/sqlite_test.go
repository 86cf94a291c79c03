package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// base is the tests' clock start; times carry nanoseconds and a non-UTC
// location to prove exact round trips.
var base = time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.FixedZone("X", 3600))

// openStore opens a Store on a fresh file in t.TempDir().
func openStore(t testing.TB) (*sqlite.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "retrysafe.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func claimParams(key, fp string, now time.Time) *retrysafe.ClaimParams {
	return &retrysafe.ClaimParams{
		Scope: "tenant", Key: key, Fingerprint: fp,
		Token: retrysafe.NewToken(), Now: now, Lease: 30 * time.Second,
	}
}

func mustClaim(t *testing.T, s *sqlite.Store, p *retrysafe.ClaimParams) *retrysafe.ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), p)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return res
}

func completeParams(p *retrysafe.ClaimParams, now time.Time, body string) *retrysafe.CompleteParams {
	return &retrysafe.CompleteParams{
		Scope: p.Scope, Key: p.Key, Token: p.Token, Now: now, TTL: time.Hour,
		Response: &retrysafe.Response{
			Status: 201,
			Header: http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "b"}},
			Body:   []byte(body),
		},
	}
}

// TestSynchronous: Open applies FULL by default and NORMAL when asked.
func TestSynchronous(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]int{"": 2, "FULL": 2, "NORMAL": 1} {
		t.Run("setting "+name, func(t *testing.T) {
			t.Parallel()
			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "s.db"), sqlite.Config{Synchronous: name})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var got int
			if err := s.DB().QueryRow("PRAGMA synchronous").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("PRAGMA synchronous = %d, want %d", got, want)
			}
		})
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "x.db"), sqlite.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tests := map[string]struct {
		cfg     sqlite.Config
		wantErr bool
	}{
		"zero":               {sqlite.Config{}, false},
		"custom table":       {sqlite.Config{Table: "idem_2"}, false},
		"keyword":            {sqlite.Config{Table: "order"}, false},
		"underscore first":   {sqlite.Config{Table: "_t"}, false},
		"digit first":        {sqlite.Config{Table: "2t"}, true},
		"injection":          {sqlite.Config{Table: "t; DROP TABLE x"}, true},
		"quote":              {sqlite.Config{Table: `t"`}, true},
		"negative timeout":   {sqlite.Config{BusyTimeout: -time.Second}, true},
		"explicit timeout":   {sqlite.Config{BusyTimeout: time.Second}, false},
		"dash not allowed":   {sqlite.Config{Table: "a-b"}, true},
		"unicode not valid":  {sqlite.Config{Table: "tä"}, true},
		"synchronous normal": {sqlite.Config{Synchronous: "normal"}, false},
		"synchronous off":    {sqlite.Config{Synchronous: "OFF"}, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := sqlite.New(db, tc.cfg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("New(%+v) error = %v, want error: %v", tc.cfg, err, tc.wantErr)
			}
		})
	}
	if _, err := sqlite.New(nil, sqlite.Config{}); err == nil {
		t.Error("New(nil) returned no error")
	}
	for _, path := range []string{"", ":memory:"} {
		if _, err := sqlite.Open(context.Background(), path, sqlite.Config{}); err == nil {
			t.Errorf("Open(%q) returned no error", path)
		}
	}
}

// TestRoundTrip checks the stored fields exactly: times (to the
// nanosecond, returned in UTC), headers, body, attempt, token.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	p := claimParams("k1", "fp", base)
	res := mustClaim(t, s, p)
	if !res.Claimed || res.Record.State != retrysafe.StateProcessing || res.Record.Attempt != 1 || res.Record.Token != p.Token {
		t.Fatalf("first claim = %+v", res.Record)
	}
	if !res.Record.CreatedAt.Equal(base) || !res.Record.LeaseUntil.Equal(base.Add(30*time.Second)) {
		t.Fatalf("times: created %v lease %v", res.Record.CreatedAt, res.Record.LeaseUntil)
	}
	if res.Record.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt location = %v, want UTC", res.Record.CreatedAt.Location())
	}
	if !res.Record.ExpiresAt.IsZero() || res.Record.Response != nil {
		t.Errorf("processing record has ExpiresAt %v, Response %v", res.Record.ExpiresAt, res.Record.Response)
	}

	done := base.Add(2 * time.Second)
	cp := completeParams(p, done, `{"id":1}`)
	if err := s.Complete(ctx, cp); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got, err := s.Get(ctx, &retrysafe.GetParams{Scope: "tenant", Key: "k1", Now: done})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.State != retrysafe.StateCompleted || !got.ExpiresAt.Equal(done.Add(time.Hour)) || !got.UpdatedAt.Equal(done) {
		t.Fatalf("completed record = %+v", got)
	}
	if !reflect.DeepEqual(got.Response, cp.Response) {
		t.Fatalf("Response = %+v, want %+v", got.Response, cp.Response)
	}

	// A replay claim returns the completed record unchanged.
	rep := mustClaim(t, s, claimParams("k1", "fp", done.Add(time.Minute)))
	if rep.Claimed || rep.Record.State != retrysafe.StateCompleted || string(rep.Record.Response.Body) != `{"id":1}` {
		t.Fatalf("replay = claimed %v %+v", rep.Claimed, rep.Record)
	}

	// Expired on read: Get says not found, Claim replaces it (attempt 1).
	later := done.Add(time.Hour)
	if _, err := s.Get(ctx, &retrysafe.GetParams{Scope: "tenant", Key: "k1", Now: later}); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Fatalf("Get after expiry: %v, want ErrNotFound", err)
	}
	again := mustClaim(t, s, claimParams("k1", "other-fp", later))
	if !again.Claimed || again.Record.Attempt != 1 || !again.Record.CreatedAt.Equal(later) || again.Record.Fingerprint != "other-fp" {
		t.Fatalf("claim after expiry = %v %+v", again.Claimed, again.Record)
	}
}

func TestEmptyAndNilBodies(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	for name, resp := range map[string]*retrysafe.Response{
		"nil body":      {Status: 204},
		"empty body":    {Status: 204, Body: []byte{}, Header: http.Header{}},
		"nil response":  nil,
		"binary":        {Status: 200, Body: []byte{0, 1, 2, 0xff}},
		"large (2 MiB)": {Status: 200, Body: make([]byte, 2<<20)},
	} {
		p := claimParams(name, "fp", base)
		mustClaim(t, s, p)
		if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: p.Scope, Key: p.Key, Token: p.Token, Now: base, TTL: time.Hour, Response: resp}); err != nil {
			t.Fatalf("%s: Complete: %v", name, err)
		}
		got, err := s.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: base})
		if err != nil {
			t.Fatalf("%s: Get: %v", name, err)
		}
		want := resp
		if want == nil {
			want = &retrysafe.Response{}
		}
		if got.Response.Status != want.Status || len(got.Response.Body) != len(want.Body) || string(got.Response.Body) != string(want.Body) {
			t.Errorf("%s: got status %d body len %d, want %d, %d", name, got.Response.Status, len(got.Response.Body), want.Status, len(want.Body))
		}
		if len(got.Response.Header) != len(want.Header) {
			t.Errorf("%s: headers %v, want %v", name, got.Response.Header, want.Header)
		}
	}
}

// TestFencing: Extend, Complete and Release with a wrong token, on a
// completed record, or on an absent key all return ErrLeaseLost and change
// nothing.
func TestFencing(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	p := claimParams("k", "fp", base)
	mustClaim(t, s, p)

	wrong := "not-the-token"
	calls := map[string]func(token, key string) error{
		"extend": func(token, key string) error {
			return s.Extend(ctx, &retrysafe.ExtendParams{Scope: "tenant", Key: key, Token: token, Now: base, Lease: time.Minute})
		},
		"complete": func(token, key string) error {
			return s.Complete(ctx, &retrysafe.CompleteParams{Scope: "tenant", Key: key, Token: token, Now: base, TTL: time.Hour})
		},
		"release": func(token, key string) error {
			return s.Release(ctx, &retrysafe.ReleaseParams{Scope: "tenant", Key: key, Token: token})
		},
	}
	for name, call := range calls {
		if err := call(wrong, "k"); !errors.Is(err, retrysafe.ErrLeaseLost) {
			t.Errorf("%s with a wrong token: %v, want ErrLeaseLost", name, err)
		}
		if err := call(p.Token, "absent"); !errors.Is(err, retrysafe.ErrLeaseLost) {
			t.Errorf("%s on an absent key: %v, want ErrLeaseLost", name, err)
		}
	}
	// The owner extends after its lease ran out (not taken over): allowed.
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: "tenant", Key: "k", Token: p.Token, Now: base.Add(time.Hour), Lease: time.Minute}); err != nil {
		t.Fatalf("owner Extend: %v", err)
	}
	got, err := s.Get(ctx, &retrysafe.GetParams{Scope: "tenant", Key: "k", Now: base})
	if err != nil || !got.LeaseUntil.Equal(base.Add(time.Hour+time.Minute)) {
		t.Fatalf("after Extend: %+v, %v", got, err)
	}
	// Takeover by another claimant fences the first owner out.
	p2 := claimParams("k", "fp", base.Add(2*time.Hour))
	if res := mustClaim(t, s, p2); !res.Claimed || res.Record.Attempt != 2 || !res.Record.CreatedAt.Equal(base) {
		t.Fatalf("takeover = %v %+v", res.Claimed, res.Record)
	}
	for name, call := range calls {
		if err := call(p.Token, "k"); !errors.Is(err, retrysafe.ErrLeaseLost) {
			t.Errorf("%s by the old owner: %v, want ErrLeaseLost", name, err)
		}
	}
	if err := s.Complete(ctx, completeParams(p2, base.Add(2*time.Hour), "ok")); err != nil {
		t.Fatalf("new owner Complete: %v", err)
	}
	for name, call := range calls {
		if err := call(p2.Token, "k"); !errors.Is(err, retrysafe.ErrLeaseLost) {
			t.Errorf("%s on a completed record: %v, want ErrLeaseLost", name, err)
		}
	}
}

// TestConcurrentClaimRounds: 100 goroutines claim one key at once, 20
// rounds; exactly one wins each round and every loser sees the winner's
// record. The winner completes, and the next round's key expires first so
// it is claimable again.
func TestConcurrentClaimRounds(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	const goroutines, rounds = 100, 20
	b0, o0 := s.BatchCounts()
	for round := range rounds {
		now := base.Add(time.Duration(round) * 2 * time.Hour) // previous round's record has expired
		params := make([]*retrysafe.ClaimParams, goroutines)
		results := make([]*retrysafe.ClaimResult, goroutines)
		errs := make([]error, goroutines)
		start := make(chan struct{})
		var ready, done sync.WaitGroup
		for i := range goroutines {
			params[i] = claimParams("hot", "fp", now)
			ready.Add(1)
			done.Go(func() {
				ready.Done()
				<-start
				results[i], errs[i] = s.Claim(ctx, params[i])
			})
		}
		ready.Wait()
		close(start)
		done.Wait()
		winner := -1
		for i := range goroutines {
			if errs[i] != nil {
				t.Fatalf("round %d: claim %d: %v", round, i, errs[i])
			}
			if results[i].Claimed {
				if winner >= 0 {
					t.Fatalf("round %d: claims %d and %d both won", round, winner, i)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody won", round)
		}
		for i := range goroutines {
			if results[i].Record.Token != params[winner].Token {
				t.Fatalf("round %d: claim %d saw token %q, want the winner's", round, i, results[i].Record.Token)
			}
		}
		if err := s.Complete(ctx, completeParams(params[winner], now, fmt.Sprint(round))); err != nil {
			t.Fatalf("round %d: Complete: %v", round, err)
		}
	}
	// The claims that found the key absent on their read queued for the
	// writer together: group commit put more than one in a transaction.
	b1, o1 := s.BatchCounts()
	if batches, ops := b1-b0, o1-o0; ops <= batches {
		t.Errorf("%d writes in %d batches: no batch held more than one write", ops, batches)
	} else {
		t.Logf("%d writes in %d batches (%.1f per batch)", ops, batches, float64(ops)/float64(batches))
	}
}

// TestSharedFileConcurrentClaims: two Stores on two *sql.DB on one file
// (as two processes would be), 50 goroutines each, one key: one winner.
func TestSharedFileConcurrentClaims(t *testing.T) {
	t.Parallel()
	a, path := openStore(t)
	b, err := sqlite.Open(context.Background(), path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var wins atomic.Int32
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		s := a
		if i%2 == 1 {
			s = b
		}
		ready.Add(1)
		done.Go(func() {
			ready.Done()
			<-start
			res, err := s.Claim(context.Background(), claimParams("shared", "fp", base))
			if err != nil {
				errs <- err
				return
			}
			if res.Claimed {
				wins.Add(1)
			}
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Claim: %v", err)
	}
	if wins.Load() != 1 {
		t.Fatalf("%d winners, want 1", wins.Load())
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Claim(cancelled, claimParams("k", "fp", base)); !errors.Is(err, context.Canceled) {
		t.Errorf("Claim with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := s.Get(cancelled, &retrysafe.GetParams{Scope: "tenant", Key: "k", Now: base}); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := s.Get(context.Background(), &retrysafe.GetParams{Scope: "tenant", Key: "k", Now: base}); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Errorf("Get after cancelled Claim: %v, want ErrNotFound (nothing changed)", err)
	}
	s.Close()
	_, err := s.Claim(context.Background(), claimParams("k", "fp", base))
	if !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Errorf("Claim on a closed DB: %v, want ErrStoreUnavailable", err)
	}
	if err := s.Ping(context.Background()); !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Errorf("Ping on a closed DB: %v, want ErrStoreUnavailable", err)
	}
}

// TestBusyBecomesWait: another connection holds the write lock for a
// while; a Claim waits for it instead of failing, both on a DB with
// busy_timeout (Open) and on a caller's DB without one (the store's own
// retry). One that outlasts BusyTimeout fails as unavailable.
func TestBusyBecomesWait(t *testing.T) {
	t.Parallel()
	s, path := openStore(t)
	ctx := context.Background()
	// plain has no busy_timeout: SQLITE_BUSY surfaces at once.
	plain, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	lock := func(t *testing.T, hold time.Duration) {
		conn, err := plain.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.ExecContext(ctx, "ROLLBACK"); conn.Close() })
		if hold > 0 {
			go func() {
				time.Sleep(hold)
				conn.ExecContext(ctx, "COMMIT")
			}()
		}
	}
	onPlain, err := sqlite.New(plain, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}

	for name, st := range map[string]*sqlite.Store{"busy_timeout": s, "store retry": onPlain} {
		t.Run(name, func(t *testing.T) {
			lock(t, 200*time.Millisecond)
			if _, err := st.Claim(ctx, claimParams("busy-"+name, "fp", base)); err != nil {
				t.Fatalf("Claim behind a 200ms write lock: %v", err)
			}
		})
	}

	t.Run("timeout", func(t *testing.T) {
		short, err := sqlite.New(plain, sqlite.Config{BusyTimeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		lock(t, 0)
		_, err = short.Claim(ctx, claimParams("busy-forever", "fp", base))
		if !errors.Is(err, retrysafe.ErrStoreUnavailable) {
			t.Fatalf("Claim behind a held write lock: %v, want ErrStoreUnavailable", err)
		}
	})
}

func TestSubscribe(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	p := claimParams("k", "fp", base)
	mustClaim(t, s, p)
	ch, cancel, err := s.Subscribe(ctx, "tenant", "k")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	other, cancelOther, err := s.Subscribe(ctx, "tenant", "other")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, completeParams(p, base, "x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no notification after Complete")
	}
	select {
	case <-other:
		t.Fatal("notification for another key")
	default:
	}
	cancelOther()
	cancelOther() // twice is fine

	// A subscription outlives its context, and ends when its function is
	// called.
	sctx, scancel := context.WithCancel(ctx)
	ch2, cancel2, err := s.Subscribe(sctx, "tenant", "k2")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel2()
	scancel()
	p2 := claimParams("k2", "fp", base)
	mustClaim(t, s, p2)
	if err := s.Release(ctx, &retrysafe.ReleaseParams{Scope: "tenant", Key: "k2", Token: p2.Token}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch2:
	case <-time.After(5 * time.Second):
		t.Fatal("no notification after the context of Subscribe ended")
	}
	cancel2()
	p3 := claimParams("k2", "fp", base)
	mustClaim(t, s, p3)
	if err := s.Release(ctx, &retrysafe.ReleaseParams{Scope: "tenant", Key: "k2", Token: p3.Token}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch2:
		t.Error("notification after the subscription was ended")
	default:
	}
}

func TestListAndDelete(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	for _, sc := range []string{"b", "a"} {
		for _, k := range []string{"2", "1", "3"} {
			p := claimParams(k, "fp", base)
			p.Scope = sc
			mustClaim(t, s, p)
			if k != "3" {
				if err := s.Complete(ctx, completeParams(p, base, sc+k)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	var keys []string
	var cur admin.ListParams
	cur.Limit = 2
	for {
		page, err := s.List(ctx, &cur)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			keys = append(keys, r.Scope+r.Key)
			if r.Response != nil && r.Response.Body != nil {
				t.Errorf("List without bodies returned body for %s", r.Scope+r.Key)
			}
		}
		if len(page) < cur.Limit {
			break
		}
		cur.AfterScope, cur.AfterKey = page[len(page)-1].Scope, page[len(page)-1].Key
	}
	if want := []string{"a1", "a2", "a3", "b1", "b2", "b3"}; !reflect.DeepEqual(keys, want) {
		t.Fatalf("listed %v, want %v", keys, want)
	}
	page, err := s.List(ctx, &admin.ListParams{Scope: "b", WithBodies: true})
	if err != nil || len(page) != 3 || string(page[0].Response.Body) != "b1" {
		t.Fatalf("List scope b with bodies: %v %v", page, err)
	}
	if err := s.Delete(ctx, "b", "3"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "b", "3"); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Fatalf("second Delete: %v, want ErrNotFound", err)
	}
}
