package postgres_test

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/store/postgres"
)

const (
	scope = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	fpA   = "fp-a"
	fpB   = "fp-b"
	lease = 30 * time.Second
	ttl   = 24 * time.Hour
)

func claimP(key, fp string, now time.Time) *retrysafe.ClaimParams {
	return &retrysafe.ClaimParams{Scope: scope, Key: key, Fingerprint: fp, Token: retrysafe.NewToken(), Now: now, Lease: lease}
}

func mustClaim(t *testing.T, s retrysafe.Store, p *retrysafe.ClaimParams) *retrysafe.ClaimResult {
	t.Helper()
	res, err := s.Claim(t.Context(), p)
	if err != nil {
		t.Fatalf("Claim(%q): %v", p.Key, err)
	}
	return res
}

// TestLifecycle walks one key through every state with nanosecond times, and
// checks that times and responses round-trip exactly.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()

	p1 := claimP("k", fpA, at(0))
	res := mustClaim(t, s, p1)
	if !res.Claimed || res.Record.Token != p1.Token || res.Record.Attempt != 1 ||
		!res.Record.CreatedAt.Equal(p1.Now) || !res.Record.LeaseUntil.Equal(p1.Now.Add(lease)) || res.Record.Response != nil {
		t.Fatalf("first claim: %+v", res.Record)
	}

	// A live lease blocks, with either fingerprint.
	for _, fp := range []string{fpA, fpB} {
		if res := mustClaim(t, s, claimP("k", fp, at(time.Second))); res.Claimed || res.Record.Token != p1.Token {
			t.Fatalf("claim during live lease (fp %s): claimed=%v token=%s", fp, res.Claimed, res.Record.Token)
		}
	}
	// An expired lease with another fingerprint blocks; with the same one it
	// is taken over (attempt 2, CreatedAt kept).
	if res := mustClaim(t, s, claimP("k", fpB, at(lease))); res.Claimed {
		t.Fatal("takeover with another fingerprint succeeded")
	}
	p2 := claimP("k", fpA, at(lease+time.Nanosecond))
	res = mustClaim(t, s, p2)
	if !res.Claimed || res.Record.Attempt != 2 || !res.Record.CreatedAt.Equal(p1.Now) || !res.Record.UpdatedAt.Equal(p2.Now) {
		t.Fatalf("takeover: claimed=%v %+v", res.Claimed, res.Record)
	}

	// The old owner is fenced out.
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope, Key: "k", Token: p1.Token, Now: at(lease), Lease: lease}); !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("Extend by old owner: %v", err)
	}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "k", Token: p1.Token, Now: at(lease), TTL: ttl, Response: &retrysafe.Response{Status: 500}}); !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("Complete by old owner: %v", err)
	}
	if err := s.Release(ctx, &retrysafe.ReleaseParams{Scope: scope, Key: "k", Token: p1.Token}); !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("Release by old owner: %v", err)
	}

	// The new owner extends and completes.
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope, Key: "k", Token: p2.Token, Now: at(40 * time.Second), Lease: time.Minute}); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "k", Now: at(41 * time.Second)})
	if err != nil || !rec.LeaseUntil.Equal(at(100*time.Second)) {
		t.Fatalf("Get after Extend: %+v, %v", rec, err)
	}
	resp := &retrysafe.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "", "c, d"}, "X-Bin": {"\xff\x00ok"}, "X-Empty": {}},
		Body:   []byte("{\"id\":1}\n\x00\xff"),
	}
	done := at(50*time.Second + 7)
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "k", Token: p2.Token, Now: done, TTL: ttl, Response: resp}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "k", Token: p2.Token, Now: done, TTL: ttl, Response: resp}); !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("second Complete: %v, want ErrLeaseLost", err)
	}
	// Replays return the stored response, byte for byte, until expiry.
	res = mustClaim(t, s, claimP("k", fpA, done.Add(ttl-time.Nanosecond)))
	if res.Claimed || res.Record.State != retrysafe.StateCompleted || !res.Record.ExpiresAt.Equal(done.Add(ttl)) || !res.Record.UpdatedAt.Equal(done) {
		t.Fatalf("replay: claimed=%v %+v", res.Claimed, res.Record)
	}
	if !reflect.DeepEqual(res.Record.Response, resp) {
		t.Fatalf("replayed response differs:\n got %#v\nwant %#v", res.Record.Response, resp)
	}
	if _, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "k", Now: done.Add(ttl)}); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Fatalf("Get at expiry: %v, want ErrNotFound", err)
	}
	// At expiry the key is new again.
	p3 := claimP("k", fpB, done.Add(ttl))
	res = mustClaim(t, s, p3)
	if !res.Claimed || res.Record.Attempt != 1 || !res.Record.CreatedAt.Equal(p3.Now) || res.Record.Response != nil || !res.Record.ExpiresAt.IsZero() {
		t.Fatalf("claim after expiry: claimed=%v %+v", res.Claimed, res.Record)
	}
	if err := s.Release(ctx, &retrysafe.ReleaseParams{Scope: scope, Key: "k", Token: p3.Token}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "k", Now: p3.Now}); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Fatalf("Get after Release: %v, want ErrNotFound", err)
	}
}

// TestResponseShapes checks nil and empty headers and bodies.
func TestResponseShapes(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	for name, resp := range map[string]*retrysafe.Response{
		"nil header and body":   {Status: 204},
		"empty header and body": {Status: 200, Header: http.Header{}, Body: []byte{}},
		"large body":            {Status: 200, Body: make([]byte, 5<<20)},
	} {
		t.Run(name, func(t *testing.T) {
			p := claimP(name, fpA, at(0))
			mustClaim(t, s, p)
			if err := s.Complete(t.Context(), &retrysafe.CompleteParams{Scope: scope, Key: name, Token: p.Token, Now: at(1), TTL: ttl, Response: resp}); err != nil {
				t.Fatal(err)
			}
			rec, err := s.Get(t.Context(), &retrysafe.GetParams{Scope: scope, Key: name, Now: at(2)})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rec.Response, resp) {
				t.Fatalf("got %#v, want %#v", rec.Response.Header, resp.Header)
			}
		})
	}
}

// TestConcurrentClaims races 32 claimants on one absent key, then on one
// expired lease: exactly one wins each time, and every loser sees the
// winner's record in the same call.
func TestConcurrentClaims(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	race := func(now time.Time) (winner string, tokens []string) {
		const n = 32
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			mu    sync.Mutex
			wins  []string
			seen  []string
		)
		for range n {
			wg.Go(func() {
				p := claimP("hot", fpA, now)
				<-start
				res, err := s.Claim(context.Background(), p)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if res.Claimed {
					wins = append(wins, p.Token)
				}
				seen = append(seen, res.Record.Token)
			})
		}
		close(start)
		wg.Wait()
		if len(wins) != 1 {
			t.Fatalf("%d winners, want 1", len(wins))
		}
		return wins[0], seen
	}
	w, seen := race(at(0))
	for _, tok := range seen {
		if tok != w {
			t.Fatalf("a claimant saw token %s, want the winner's %s", tok, w)
		}
	}
	w2, seen := race(at(lease)) // the lease has expired: one takeover
	if w2 == w {
		t.Fatal("takeover kept the old token")
	}
	for _, tok := range seen {
		if tok != w2 {
			t.Fatalf("a claimant saw token %s, want the new winner's %s", tok, w2)
		}
	}
	rec, err := s.Get(t.Context(), &retrysafe.GetParams{Scope: scope, Key: "hot", Now: at(lease)})
	if err != nil || rec.Attempt != 2 {
		t.Fatalf("after takeover race: %+v, %v", rec, err)
	}
}

// TestSweep deletes only expired completed records, in batches.
func TestSweep(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	for i := range 25 {
		p := claimP(keyN("done", i), fpA, at(0))
		mustClaim(t, s, p)
		if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: p.Key, Token: p.Token, Now: at(time.Duration(i) * time.Second), TTL: time.Hour, Response: &retrysafe.Response{Status: 200}}); err != nil {
			t.Fatal(err)
		}
	}
	mustClaim(t, s, claimP("processing", fpA, at(0)))
	n, err := s.Sweep(ctx, &admin.SweepParams{Now: at(time.Hour + 9*time.Second), BatchSize: 3})
	if err != nil || n != 10 {
		t.Fatalf("Sweep = %d, %v; want 10", n, err)
	}
	n, err = s.Sweep(ctx, &admin.SweepParams{Now: at(48 * time.Hour)})
	if err != nil || n != 15 {
		t.Fatalf("second Sweep = %d, %v; want 15", n, err)
	}
	recs, err := s.List(ctx, &admin.ListParams{})
	if err != nil || len(recs) != 1 || recs[0].Key != "processing" {
		t.Fatalf("left after sweeping: %v, %v", recs, err)
	}
}

// TestSweepWhileClaiming sweeps many expired records in small batches while
// claimants replace the same records: no call fails or waits on the other,
// and every record ends up either deleted or freshly claimed.
func TestSweepWhileClaiming(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	const n = 600
	if _, err := s.Pool().Exec(ctx, "INSERT INTO "+pgx.Identifier{s.Config().Schema, s.Config().Table}.Sanitize()+
		` (scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, expires_at_ns, status, body)
		SELECT $1, 'k-' || i, $2, 'completed', 'old', 1, $3::bigint, $3::bigint, $3::bigint, $3::bigint + i, 200, 'x' FROM generate_series(0, $4 - 1) AS i`,
		scope, fpA, at(0).UnixNano(), n); err != nil {
		t.Fatal(err)
	}
	sweepAt := at(time.Hour)
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		claimed atomic.Int64
		swept   atomic.Int64
	)
	for w := range 4 {
		wg.Go(func() {
			<-start
			for i := w; i < n; i += 4 {
				res, err := s.Claim(ctx, claimP(keyN("k", i), fpA, sweepAt))
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Claimed {
					t.Errorf("claim of expired record %d lost", i)
				}
				claimed.Add(1)
			}
		})
	}
	wg.Go(func() {
		<-start
		for range 3 {
			m, err := s.Sweep(ctx, &admin.SweepParams{Now: sweepAt, BatchSize: 25})
			if err != nil {
				t.Error(err)
				return
			}
			swept.Add(int64(m))
		}
	})
	close(start)
	wg.Wait()
	recs, err := s.List(ctx, &admin.ListParams{Limit: 2 * n})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.State != retrysafe.StateProcessing || r.Token == "old" {
			t.Fatalf("record left behind: %+v", r)
		}
	}
	if claimed.Load() != n || int64(len(recs)) != n {
		t.Fatalf("claimed %d, %d records left, swept %d; want %d claimed and left", claimed.Load(), len(recs), swept.Load(), n)
	}
	t.Logf("swept %d of %d expired records while they were being claimed", swept.Load(), n)
}

// TestAdmin pages through records in (scope, key) byte order and deletes.
func TestAdmin(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	keys := []string{"B", "a", "a-1", "b", "~"}
	for _, sc := range []string{"s2", "s1"} {
		for _, k := range keys {
			p := claimP(k, fpA, at(0))
			p.Scope = sc
			mustClaim(t, s, p)
			if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: sc, Key: k, Token: p.Token, Now: at(0), TTL: ttl, Response: &retrysafe.Response{Status: 201, Body: []byte("body")}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var got []string
	lp := &admin.ListParams{Limit: 3}
	for {
		page, err := s.List(ctx, lp)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			got = append(got, r.Scope+"/"+r.Key)
			if r.Response == nil || r.Response.Status != 201 || r.Response.Body != nil {
				t.Fatalf("listed without bodies: %+v", r.Response)
			}
		}
		last := page[len(page)-1]
		lp.AfterScope, lp.AfterKey = last.Scope, last.Key
	}
	want := []string{"s1/B", "s1/a", "s1/a-1", "s1/b", "s1/~", "s2/B", "s2/a", "s2/a-1", "s2/b", "s2/~"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("List order = %v, want %v", got, want)
	}
	page, err := s.List(ctx, &admin.ListParams{Scope: "s2", WithBodies: true, Limit: 2})
	if err != nil || len(page) != 2 || page[0].Scope != "s2" || string(page[0].Response.Body) != "body" {
		t.Fatalf("List(scope s2, with bodies) = %v, %v", page, err)
	}
	if err := s.Delete(ctx, "s1", "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "s1", "a"); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Fatalf("second Delete: %v, want ErrNotFound", err)
	}
}

// TestMigrateConcurrently migrates one fresh schema from many goroutines at
// once, each with a store of its own: all succeed and the table is created
// once.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	pool := sharedPool(t)
	for round := range 5 {
		schema := newSchema(t)
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
		)
		for _, table := range []string{"records_a", "records_a", "records_a", "records_b", "records_b", "records_b"} {
			wg.Go(func() {
				s, err := postgres.New(pool, postgres.Config{Schema: schema, Table: table})
				if err != nil {
					t.Error(err)
					return
				}
				<-start
				if err := s.Migrate(context.Background()); err != nil {
					t.Errorf("round %d: Migrate(%s): %v", round, table, err)
				}
			})
		}
		close(start)
		wg.Wait()
		for _, table := range []string{"records_a", "records_b"} {
			s, err := postgres.New(pool, postgres.Config{Schema: schema, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			v, err := s.SchemaVersion(t.Context())
			if err != nil || v != postgres.LatestSchemaVersion() {
				t.Fatalf("SchemaVersion(%s) = %d, %v; want %d", table, v, err, postgres.LatestSchemaVersion())
			}
			if res := mustClaim(t, s, claimP("k", fpA, at(0))); !res.Claimed {
				t.Fatal("claim on migrated table failed")
			}
		}
	}
}

// TestOpen reads schema and table from the URL, migrates, and owns its pool.
func TestOpen(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	u := testURL() + "&" + postgres.URLParamSchema + "=" + schema + "&" + postgres.URLParamTable + "=my_records"
	s, err := postgres.Open(t.Context(), u, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.Config(); cfg.Schema != schema || cfg.Table != "my_records" || cfg.NotifyChannel != schema+".my_records" {
		t.Fatalf("Config = %+v", cfg)
	}
	if res := mustClaim(t, s, claimP("k", fpA, at(0))); !res.Claimed {
		t.Fatal("claim failed")
	}
	var n int
	if err := sharedPool(t).QueryRow(t.Context(), "SELECT count(*) FROM "+schema+".my_records").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows in %s.my_records = %d, %v", schema, n, err)
	}
	s.Close()
	if err := s.Ping(context.Background()); !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Fatalf("Ping after Close = %v, want ErrStoreUnavailable (pool closed)", err)
	}
	if _, err := postgres.Open(t.Context(), u, postgres.Config{Table: "other"}); err == nil {
		t.Fatal("Open with a URL table that disagrees with Config succeeded")
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	pool := sharedPool(t)
	for name, tc := range map[string]struct {
		cfg postgres.Config
		ok  bool
	}{
		"defaults":          {postgres.Config{}, true},
		"mixed case":        {postgres.Config{Schema: "MySchema", Table: "Records_1"}, true},
		"quote in schema":   {postgres.Config{Schema: `x"; DROP TABLE y; --`}, false},
		"dot in table":      {postgres.Config{Table: "a.b"}, false},
		"leading digit":     {postgres.Config{Table: "1records"}, false},
		"too long":          {postgres.Config{Table: "t234567890123456789012345678901234567890123456789012345678901234"}, false},
		"reserved table":    {postgres.Config{Table: "retrysafe_migrations"}, false},
		"table of 48 bytes": {postgres.Config{Table: "t23456789012345678901234567890123456789012345678"}, true},
		"table of 49 bytes": {postgres.Config{Table: "t234567890123456789012345678901234567890123456789"}, false},
		"long default chan": {postgres.Config{Schema: "s23456789012345678901234567890123456789", Table: "t23456789012345678901234567890123456789"}, true},
		"channel too long":  {postgres.Config{NotifyChannel: "c234567890123456789012345678901234567890123456789012345678901234"}, false},
		"session pooling":   {postgres.Config{PoolMode: postgres.PoolModeSession}, true},
		"statement pooling": {postgres.Config{PoolMode: "statement"}, false},
		"unknown pool mode": {postgres.Config{PoolMode: "Transaction"}, false},
		"negative poll":     {postgres.Config{NotifyPollInterval: -time.Second}, false},
		"bad notify conn":   {postgres.Config{NotifyConnString: "postgres://a@b:notaport/c"}, false},
		"notify conn":       {postgres.Config{NotifyConnString: defaultURL}, true},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := postgres.New(pool, tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("New(%+v) error = %v, want ok=%v", tc.cfg, err, tc.ok)
			}
			if err == nil && len(s.Config().NotifyChannel) > 63 {
				t.Fatalf("channel %q too long", s.Config().NotifyChannel)
			}
		})
	}
}
