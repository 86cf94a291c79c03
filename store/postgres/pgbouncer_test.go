package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/postgres"
	"github.com/retrysafe/retrysafe/store/storetest"
)

// The tests in this file run the store through PgBouncer (.ci/pgbouncer.ini,
// started by .ci/run): RETRYSAFE_PGBOUNCER_URL, transaction pooling, and
// the same database under session and statement pooling.

var bouncer struct {
	once sync.Once
	err  error
}

// pgbouncerURL returns the PgBouncer URL for database db ("" keeps the
// URL's own, transaction pooling) with the given extra query parameters,
// after checking once that PgBouncer answers; it skips the test, or fails
// it under CI=true, when it does not.
func pgbouncerURL(t testing.TB, db string, params url.Values) string {
	t.Helper()
	sharedPool(t) // the schemas are made and dropped directly
	bouncer.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cfg, err := pgx.ParseConfig(testenv.PgBouncerURL())
		if err != nil {
			bouncer.err = err
			return
		}
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		bouncer.err = err
	})
	if bouncer.err != nil {
		testenv.Unreachable(t, "PgBouncer at "+testenv.PgBouncerURL(), bouncer.err)
	}
	u, err := url.Parse(testenv.PgBouncerURL())
	if err != nil {
		t.Fatal(err)
	}
	if db != "" {
		u.Path = "/" + strings.TrimPrefix(u.Path, "/") + db
	}
	q := u.Query()
	for k, vs := range params {
		for _, v := range vs {
			q.Add(k, v)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// openBouncer opens a store through PgBouncer in transaction mode in
// schema, with extra URL parameters, closed when the test ends.
func openBouncer(t testing.TB, schema string, params url.Values) *postgres.Store {
	t.Helper()
	if params == nil {
		params = url.Values{}
	}
	params.Set(postgres.URLParamSchema, schema)
	if !params.Has(postgres.URLParamPoolMode) {
		params.Set(postgres.URLParamPoolMode, postgres.PoolModeTransaction)
	}
	s, err := postgres.Open(t.Context(), pgbouncerURL(t, "", params), postgres.Config{})
	if err != nil {
		t.Fatalf("Open through PgBouncer: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestPgBouncerConformance runs the shared store suite through PgBouncer in
// transaction mode: with Subscribe polling, and with Subscribe listening on
// a direct connection (retrysafe_notify_url).
func TestPgBouncerConformance(t *testing.T) {
	t.Parallel()
	t.Run("poll", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, func(t *testing.T) retrysafe.Store {
			s := openBouncer(t, newSchema(t), nil)
			if s.Config().PoolMode != postgres.PoolModeTransaction || s.Config().NotifyConnString != "" {
				t.Fatalf("Config = %+v", s.Config())
			}
			return s
		})
	})
	t.Run("notify_url", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, func(t *testing.T) retrysafe.Store {
			return openBouncer(t, newSchema(t), url.Values{postgres.URLParamNotifyURL: {testURL()}})
		})
	})
}

// TestPgBouncerShared runs the two-instance suite with one store through
// PgBouncer (polling for notifications) and one on PostgreSQL directly, on
// one schema: the mixed topology of a rolling migration to a pooler.
func TestPgBouncerShared(t *testing.T) {
	t.Parallel()
	storetest.RunShared(t, func(t *testing.T) (a, b retrysafe.Store) {
		schema := newSchema(t)
		return openBouncer(t, schema, nil), newStoreOn(t, newPool(t, 8), schema)
	})
}

// TestPgBouncerMigrateConcurrently migrates one fresh schema from many
// stores at once through PgBouncer in transaction mode, where a session
// advisory lock would stay behind on a server session: all succeed, and
// the tables work.
func TestPgBouncerMigrateConcurrently(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgbouncerURL(t, "", url.Values{"default_query_exec_mode": {"cache_describe"}}))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for round := range 5 {
		schema := newSchema(t)
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
		)
		for _, table := range []string{"records_a", "records_a", "records_a", "records_b", "records_b", "records_b"} {
			wg.Go(func() {
				s, err := postgres.New(pool, postgres.Config{Schema: schema, Table: table, PoolMode: postgres.PoolModeTransaction})
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
			s, err := postgres.New(pool, postgres.Config{Schema: schema, Table: table, PoolMode: postgres.PoolModeTransaction})
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
	// No advisory lock was left behind on a server session: a lock that
	// outlived its migration is held by a session that is idle (outside
	// any transaction). Other tests on this server may hold transaction
	// locks of their own migrations meanwhile; those sessions are busy, so
	// they are not counted.
	var locks int
	if err := sharedPool(t).QueryRow(t.Context(), `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND a.state = 'idle'`).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	if locks != 0 {
		t.Fatalf("%d advisory locks held by idle sessions after the migrations", locks)
	}
}

// TestPgBouncerRefusals: the store refuses the set-ups it cannot be
// correct in, with an error that says why.
func TestPgBouncerRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, db, mode string
		want           string
	}{
		// PgBouncer rejects the startup parameter the store sends to a
		// direct PostgreSQL; the error points to retrysafe_pool_mode.
		{"pool mode not given", "", "", postgres.URLParamPoolMode + "=transaction"},
		// Statement pooling allows no transaction.
		{"statement pooling", "_statement", postgres.PoolModeTransaction, "statement pooling is not supported"},
		{"statement mode named", "_statement", "statement", "statement pooling allows no transactions"},
		// Server sessions at SERIALIZABLE (PgBouncer's connect_query).
		{"serializable sessions", "_serializable", postgres.PoolModeTransaction, "run transactions at SERIALIZABLE"},
		{"unknown mode", "", "pipeline", "unknown pool mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			params := url.Values{postgres.URLParamSchema: {newSchema(t)}}
			if tc.mode != "" {
				params.Set(postgres.URLParamPoolMode, tc.mode)
			}
			s, err := postgres.Open(t.Context(), pgbouncerURL(t, tc.db, params), postgres.Config{})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open error %q does not say %q", err, tc.want)
			}
		})
	}
	t.Run("pooler unreachable", func(t *testing.T) {
		t.Parallel()
		dead := deadStore(t).Pool().Config().ConnConfig
		u := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable&connect_timeout=1&%s=transaction",
			dead.Port, postgres.URLParamPoolMode)
		s, err := postgres.Open(t.Context(), u, postgres.Config{})
		if err == nil {
			s.Close()
			t.Fatal("Open succeeded")
		}
		if !errors.Is(err, retrysafe.ErrStoreUnavailable) || strings.Contains(err.Error(), "statement pooling") {
			t.Fatalf("Open of an unreachable pooler: %v, want ErrStoreUnavailable without a word on statement pooling", err)
		}
	})
	t.Run("pool with prepared statements", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t, 2) // pgx's default: QueryExecModeCacheStatement
		if _, err := postgres.New(pool, postgres.Config{PoolMode: postgres.PoolModeTransaction}); err == nil ||
			!strings.Contains(err.Error(), "QueryExecModeCacheDescribe") {
			t.Fatalf("New in transaction mode on a pool with named prepared statements: %v", err)
		}
	})
}

// TestPgBouncerSessionMode: through PgBouncer in session mode the store
// works as on PostgreSQL directly, LISTEN included (the listener's client
// connection keeps its server session).
func TestPgBouncerSessionMode(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	params := url.Values{postgres.URLParamSchema: {schema}, postgres.URLParamPoolMode: {postgres.PoolModeSession},
		"pool_max_conns": {"2"}}
	s, err := postgres.Open(t.Context(), pgbouncerURL(t, "_session", params), postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	writer := newStoreOn(t, newPool(t, 2), schema)
	p := claimP("k", fpA, at(0))
	mustClaim(t, s, p)
	ch, unsubscribe, err := s.Subscribe(t.Context(), scope, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()
	if err := writer.Complete(t.Context(), &retrysafe.CompleteParams{Scope: scope, Key: "k", Token: p.Token, Now: at(1), TTL: ttl,
		Response: &retrysafe.Response{Status: 201, Body: []byte{0, 1, 0xff}}}); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, "LISTEN through PgBouncer in session mode", ch)
	rec, err := s.Get(t.Context(), &retrysafe.GetParams{Scope: scope, Key: "k", Now: at(2)})
	if err != nil || rec.Response == nil || string(rec.Response.Body) != "\x00\x01\xff" {
		t.Fatalf("Get = %+v, %v", rec, err)
	}
}

// TestPgBouncerNotify: a waiter on a store behind PgBouncer in transaction
// mode is woken when another instance completes, releases or deletes the
// record, both when it polls and when it listens on a direct connection.
// Polling writes no notify flag, so completions send no NOTIFY; only the
// waited-for key wakes.
func TestPgBouncerNotify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		params url.Values
		poll   bool
	}{
		{"poll", url.Values{postgres.URLParamNotifyPoll: {"20ms"}}, true},
		{"notify_url", url.Values{postgres.URLParamNotifyURL: {testURL()}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			schema := newSchema(t)
			waiter := openBouncer(t, schema, tc.params)
			if tc.poll && waiter.Config().NotifyPollInterval != 20*time.Millisecond {
				t.Fatalf("NotifyPollInterval = %s", waiter.Config().NotifyPollInterval)
			}
			writer := newStoreOn(t, newPool(t, 4), schema)
			ctx := t.Context()
			subscribe := func(key string) <-chan struct{} {
				t.Helper()
				ch, unsubscribe, err := waiter.Subscribe(ctx, scope, key)
				if err != nil {
					t.Fatalf("Subscribe(%q): %v", key, err)
				}
				t.Cleanup(unsubscribe)
				return ch
			}
			mustClaim(t, writer, claimP("unrelated", fpA, at(0)))
			other := subscribe("unrelated")

			for _, finish := range []struct {
				name string
				do   func(key, token string) error
			}{
				{"complete", func(key, token string) error {
					return writer.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: key, Token: token, Now: at(1), TTL: ttl,
						Response: &retrysafe.Response{Status: 200}})
				}},
				{"release", func(key, token string) error {
					return writer.Release(ctx, &retrysafe.ReleaseParams{Scope: scope, Key: key, Token: token})
				}},
				{"delete", func(key, _ string) error { return writer.Delete(ctx, scope, key) }},
				{"takeover", func(key, _ string) error {
					// The lease ran out and another attempt took the record.
					res, err := writer.Claim(ctx, &retrysafe.ClaimParams{Scope: scope, Key: key, Fingerprint: fpA,
						Token: retrysafe.NewToken(), Now: at(lease + time.Second), Lease: lease})
					if err == nil && !res.Claimed {
						err = errors.New("takeover not claimed")
					}
					return err
				}},
			} {
				if finish.name == "takeover" && !tc.poll {
					continue // a takeover is not announced by NOTIFY; waiters poll for it
				}
				key := "k-" + finish.name
				p := claimP(key, fpA, at(0))
				mustClaim(t, writer, p)
				ch := subscribe(key)
				select {
				case <-ch:
					t.Fatalf("%s: woken before any change", finish.name)
				case <-time.After(100 * time.Millisecond):
				}
				if tc.poll {
					var flagged bool
					if err := sharedPool(t).QueryRow(ctx, "SELECT notify FROM "+pgx.Identifier{schema, "retrysafe_records"}.Sanitize()+
						" WHERE key = $1", key).Scan(&flagged); err != nil || flagged {
						t.Fatalf("%s: notify flag = %v, %v; polling should not set it", finish.name, flagged, err)
					}
				}
				if err := finish.do(key, p.Token); err != nil {
					t.Fatalf("%s: %v", finish.name, err)
				}
				waitSignal(t, finish.name+" through another instance", ch)
			}
			select {
			case <-other:
				t.Fatal("the subscriber of an unchanged record was woken")
			default:
			}
			// A subscription to a record that is not processing is woken
			// at once: the waiter re-reads it.
			if tc.poll {
				waitSignal(t, "subscriber of an absent record", subscribe("absent"))
			}
		})
	}
}

// TestPgBouncerConcurrentLoad: many callers through PgBouncer in
// transaction mode, on more client connections than PgBouncer has server
// sessions, so consecutive statements of one client connection run on
// different sessions: every Claim, Get, List and Complete succeeds (with
// pgx's default named prepared statements, the same load fails with
// "prepared statement ... already exists" or "does not exist"), and bodies
// of every byte value come back unchanged.
func TestPgBouncerConcurrentLoad(t *testing.T) {
	t.Parallel()
	s := openBouncer(t, newSchema(t), url.Values{"pool_max_conns": {"24"}})
	body := make([]byte, 256)
	for i := range body {
		body[i] = byte(i)
	}
	const callers, perCaller = 24, 30
	var wg sync.WaitGroup
	ctx := t.Context()
	for c := range callers {
		wg.Go(func() {
			for i := range perCaller {
				key := keyN("load", c*perCaller+i)
				p := claimP(key, fpA, at(0))
				res, err := s.Claim(ctx, p)
				if err == nil && !res.Claimed {
					err = errors.New("not claimed")
				}
				if err == nil {
					_, err = s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: key, Now: at(0)})
				}
				if err == nil {
					_, err = s.List(ctx, &admin.ListParams{Limit: 2})
				}
				if err == nil {
					err = s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: key, Token: p.Token, Now: at(1), TTL: ttl,
						Response: &retrysafe.Response{Status: 200, Body: body}})
				}
				if err != nil {
					t.Errorf("caller %d, op %d: %v", c, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	recs, err := s.List(ctx, &admin.ListParams{Limit: callers * perCaller * 2, WithBodies: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != callers*perCaller {
		t.Fatalf("%d records, want %d", len(recs), callers*perCaller)
	}
	for _, r := range recs {
		if r.State != retrysafe.StateCompleted || r.Response == nil || string(r.Response.Body) != string(body) {
			t.Fatalf("record %s: %+v", r.Key, r)
		}
	}
}

// BenchmarkPgBouncer compares, in one run and with 32 concurrent callers,
// the store's new request and replay on PostgreSQL directly (pgx's default
// exec mode, named prepared statements) and through PgBouncer in
// transaction mode with the exec modes that work there: cache_describe
// (what Open picks) and exec (text parameters and results).
//
//	go test -run '^$' -bench PgBouncer -benchtime 2s ./store/postgres
func BenchmarkPgBouncer(b *testing.B) {
	schema := newSchema(b)
	ctx := context.Background()
	for _, v := range []struct{ name, url string }{
		{"direct", testURL()},
		{"pgbouncer-cache_describe", pgbouncerURL(b, "", url.Values{"default_query_exec_mode": {"cache_describe"}})},
		{"pgbouncer-exec", pgbouncerURL(b, "", url.Values{"default_query_exec_mode": {"exec"}})},
	} {
		cfg, err := pgxpool.ParseConfig(v.url)
		if err != nil {
			b.Fatal(err)
		}
		cfg.MaxConns, cfg.MinConns = callers, callers
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		mode := postgres.PoolModeDirect
		if v.name != "direct" {
			mode = postgres.PoolModeTransaction
		}
		s, err := postgres.New(pool, postgres.Config{Schema: schema, PoolMode: mode})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		if err := s.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		resp := benchResponse()
		now := time.Now()
		prefix := randomPrefix()
		const perWorker = 64
		for w := 1; w <= callers; w++ {
			for i := range perWorker {
				if err := newRequest(ctx, s, fmt.Sprintf("%s-replay-%d-%d", prefix, w, i), now, resp); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Run(v.name+"/new-request", func(b *testing.B) {
			parallel32(b, func(ctx context.Context, w, i int) error {
				return newRequest(ctx, s, fmt.Sprintf("%s-new-%d", prefix, keySeq.Add(1)), now, resp)
			})
		})
		b.Run(v.name+"/replay", func(b *testing.B) {
			parallel32(b, func(ctx context.Context, w, i int) error {
				return replay(ctx, s, fmt.Sprintf("%s-replay-%d-%d", prefix, w, i%perWorker), now)
			})
		})
	}
}

// TestPgBouncerURLParams: the topology parameters are read from the URL,
// checked, and removed before connecting.
func TestPgBouncerURLParams(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := openBouncer(t, schema, url.Values{postgres.URLParamNotifyPoll: {"250ms"}, postgres.URLParamNotifyURL: {testURL()}})
	if cfg := s.Config(); cfg.PoolMode != postgres.PoolModeTransaction || cfg.NotifyPollInterval != 250*time.Millisecond ||
		cfg.NotifyConnString != testURL() || cfg.Schema != schema {
		t.Fatalf("Config = %+v", cfg)
	}
	if mode := s.Pool().Config().ConnConfig.DefaultQueryExecMode; mode != pgx.QueryExecModeCacheDescribe {
		t.Fatalf("exec mode %v, want cache_describe", mode)
	}
	// An exec mode named in the URL is kept.
	s = openBouncer(t, schema, url.Values{"default_query_exec_mode": {"exec"}})
	if mode := s.Pool().Config().ConnConfig.DefaultQueryExecMode; mode != pgx.QueryExecModeExec {
		t.Fatalf("exec mode %v, want exec", mode)
	}
	for _, tc := range []struct {
		params url.Values
		cfg    postgres.Config
		want   string
	}{
		{url.Values{postgres.URLParamNotifyPoll: {"soon"}}, postgres.Config{}, "want a positive duration"},
		{url.Values{postgres.URLParamNotifyPoll: {"0s"}}, postgres.Config{}, "want a positive duration"},
		{url.Values{postgres.URLParamNotifyPoll: {"50ms"}}, postgres.Config{NotifyPollInterval: time.Second}, "disagrees"},
		{url.Values{postgres.URLParamPoolMode: {"session"}}, postgres.Config{PoolMode: postgres.PoolModeTransaction}, "disagrees"},
		{url.Values{"default_query_exec_mode": {"cache_statement"}}, postgres.Config{}, "QueryExecModeCacheDescribe"},
	} {
		params := url.Values{postgres.URLParamSchema: {schema}, postgres.URLParamPoolMode: {postgres.PoolModeTransaction}}
		for k, v := range tc.params {
			params[k] = v
		}
		s, err := postgres.Open(t.Context(), pgbouncerURL(t, "", params), tc.cfg)
		if err == nil {
			s.Close()
			t.Fatalf("Open with %v and %+v succeeded", tc.params, tc.cfg)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Open with %v: error %q does not say %q", tc.params, err, tc.want)
		}
	}
}

// TestPgBouncerUnavailable runs the unreachable-store suite on a store
// opened through PgBouncer and then closed (Subscribe polls there).
func TestPgBouncerUnavailable(t *testing.T) {
	t.Parallel()
	storetest.RunUnavailable(t, func(t *testing.T) retrysafe.Store {
		s := openBouncer(t, newSchema(t), nil)
		s.Close()
		return s
	})
}
