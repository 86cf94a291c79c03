package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/batchtest"
	"github.com/retrysafe/retrysafe/store/postgres"
)

// holdKeys inserts processing rows for keys in a transaction that stays
// open (uncommitted) until the returned function rolls it back: a claim
// of one of those keys waits inside its statement.
func holdKeys(t *testing.T, schema string, keys ...string) (rollback func()) {
	t.Helper()
	holder, err := sharedPool(t).Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := holder.Exec(t.Context(), replaceTable(`INSERT INTO {{t}} (scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns)
			VALUES ($1, $2, 'x', 'processing', 'holder', 1, 0, 0, 0)`, schema), scope, k); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	rollback = func() {
		once.Do(func() {
			if err := holder.Rollback(context.Background()); err != nil {
				t.Errorf("rollback of the holder: %v", err)
			}
		})
	}
	t.Cleanup(rollback)
	return rollback
}

// newBatchStore returns a migrated store that runs one batch at a time
// (BatchesInFlight 1), so that a plugged batch makes every operation sent
// next queue for one next batch.
func newBatchStore(t *testing.T, pool *pgxpool.Pool, schema string) *postgres.Store {
	t.Helper()
	s, err := postgres.New(pool, postgres.Config{Schema: schema, BatchesInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// plug sends a claim of the key "plug", which holdKeys must hold, and
// waits until its batch blocks in PostgreSQL: operations sent next queue
// for one next batch. It returns the plug's error channel and the pid of
// the plug's backend.
func plug(t *testing.T, s *postgres.Store, schema string) (<-chan error, int32) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := s.Claim(context.Background(), claimP("plug", fpA, at(0)))
		errc <- err
	}()
	return errc, waitForBlockedBackend(t, sharedPool(t), schema)
}

// TestBatchSameKeyOperations: operations of one key in one batch behave
// as if run one after another, in the order they were sent: of twenty
// claims of an absent key the first wins and the others see its record; a
// completion and then a claim of the same key make the claim a replay; a
// takeover and then the old owner's completion make the completion fenced.
func TestBatchSameKeyOperations(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := newBatchStore(t, sharedPool(t), schema)
	ctx := t.Context()
	done := claimP("done", fpA, at(0))
	mustClaim(t, s, done)
	taken := claimP("taken", fpA, at(0))
	mustClaim(t, s, taken)
	resp := &retrysafe.Response{Status: 201, Body: []byte("created")}

	release := holdKeys(t, schema, "plug")
	plugErr, _ := plug(t, s, schema)
	before := s.BatchStats()

	const same = 20
	sameP := make([]*retrysafe.ClaimParams, same)
	sameRes := make([]*retrysafe.ClaimResult, same)
	var calls []func() error
	for i := range same {
		sameP[i] = claimP("same", fpA, at(0))
		calls = append(calls, func() (err error) {
			sameRes[i], err = s.Claim(ctx, sameP[i])
			return err
		})
	}
	var replay, takeover *retrysafe.ClaimResult
	takeoverP := claimP("taken", fpA, at(lease))
	var lateComplete error
	calls = append(calls,
		func() error {
			return s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "done", Token: done.Token, Now: at(time.Second), TTL: ttl, Response: resp})
		},
		func() (err error) { replay, err = s.Claim(ctx, claimP("done", fpA, at(2*time.Second))); return err },
		func() (err error) { takeover, err = s.Claim(ctx, takeoverP); return err },
		func() error {
			lateComplete = s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "taken", Token: taken.Token, Now: at(lease), TTL: ttl, Response: resp})
			return nil
		},
	)
	wait := batchtest.SendInOrder(t, s, calls)
	release()
	if err := <-plugErr; err != nil {
		t.Fatalf("plug: %v", err)
	}
	for i, err := range wait() {
		if err != nil {
			t.Fatalf("operation %d: %v", i, err)
		}
	}
	after := s.BatchStats()
	batchtest.OneBatch(t, before, after, len(calls))

	if !sameRes[0].Claimed {
		t.Errorf("the first claim of the batch lost: %+v", sameRes[0].Record)
	}
	for i, res := range sameRes[1:] {
		if res.Claimed || res.Record.Token != sameP[0].Token || res.Record.State != retrysafe.StateProcessing {
			t.Errorf("claim %d: claimed=%v, record token %q; want the first claim's record", i+1, res.Claimed, res.Record.Token)
		}
	}
	if replay.Claimed || replay.Record.State != retrysafe.StateCompleted || replay.Record.Response == nil ||
		string(replay.Record.Response.Body) != "created" {
		t.Errorf("claim after the completion in the same batch: %+v, want the completed record", replay.Record)
	}
	if !takeover.Claimed || takeover.Record.Attempt != 2 || takeover.Record.Token != takeoverP.Token {
		t.Errorf("takeover: claimed=%v attempt=%d, want a win with attempt 2", takeover.Claimed, takeover.Record.Attempt)
	}
	if !errors.Is(lateComplete, retrysafe.ErrLeaseLost) {
		t.Errorf("old owner's completion after the takeover in the same batch: %v, want ErrLeaseLost", lateComplete)
	}
	rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "taken", Now: at(lease)})
	if err != nil || rec.State != retrysafe.StateProcessing || rec.Token != takeoverP.Token {
		t.Errorf("taken after the batch: %+v, %v; want the new owner's processing record", rec, err)
	}
}

// TestBatchOneOperationFails: in one batch, a completion that a trigger
// fails fails alone, with the trigger's message; the batch's other
// operations take effect.
func TestBatchOneOperationFails(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := newBatchStore(t, sharedPool(t), schema)
	ctx := t.Context()
	if _, err := sharedPool(t).Exec(ctx, replaceTable(`CREATE FUNCTION "`+schema+`".poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'poisoned completion'; END $$;
CREATE TRIGGER poison BEFORE UPDATE ON {{t}} FOR EACH ROW
WHEN (NEW.key = 'poison' AND NEW.state = 'completed') EXECUTE FUNCTION "`+schema+`".poison()`, schema)); err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "poison", "c"}
	var calls []func() error
	for _, k := range keys {
		p := claimP(k, fpA, at(0))
		mustClaim(t, s, p)
		calls = append(calls, func() error {
			return s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: k, Token: p.Token, Now: at(0), TTL: ttl, Response: &retrysafe.Response{Status: 200}})
		})
	}
	calls = append(calls, func() error {
		res, err := s.Claim(ctx, claimP("new", fpA, at(0)))
		if err == nil && !res.Claimed {
			err = errors.New("claim of a new key not claimed")
		}
		return err
	})
	release := holdKeys(t, schema, "plug")
	plugErr, _ := plug(t, s, schema)
	wait := batchtest.SendInOrder(t, s, calls)
	release()
	if err := <-plugErr; err != nil {
		t.Fatalf("plug: %v", err)
	}
	for i, err := range wait() {
		if i == 2 {
			if !errors.Is(err, retrysafe.ErrStoreUnavailable) || !strings.Contains(err.Error(), "poisoned completion") {
				t.Errorf("poisoned Complete: %v, want ErrStoreUnavailable with the trigger's message", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("operation %d beside the poisoned one: %v", i, err)
		}
	}
	for key, want := range map[string]retrysafe.State{"a": retrysafe.StateCompleted, "b": retrysafe.StateCompleted,
		"c": retrysafe.StateCompleted, "poison": retrysafe.StateProcessing, "new": retrysafe.StateProcessing} {
		rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: key, Now: at(0)})
		if err != nil || rec.State != want {
			t.Errorf("%s: %+v, %v; want %s", key, rec, err, want)
		}
	}
}

// TestBatchBackendKilled: a batch whose backend is terminated
// (pg_terminate_backend, as a server restart would) fails every operation
// it held with ErrStoreUnavailable, none of them took effect, and the next
// operations work.
func TestBatchBackendKilled(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := newBatchStore(t, newPool(t, 4), schema)
	ctx := t.Context()
	admin := sharedPool(t)
	owned := claimP("owned", fpA, at(0))
	mustClaim(t, s, owned)

	release := holdKeys(t, schema, "plug", "held")
	plugErr, plugPid := plug(t, s, schema)
	calls := []func() error{
		func() error { _, err := s.Claim(ctx, claimP("fresh", fpA, at(0))); return err },
		func() error {
			return s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "owned", Token: owned.Token, Now: at(0), TTL: ttl, Response: &retrysafe.Response{Status: 200}})
		},
		// Keys are processed in order: the batch has inserted "fresh" when
		// it blocks on "held".
		func() error { _, err := s.Claim(ctx, claimP("held", fpA, at(0))); return err },
	}
	wait := batchtest.SendInOrder(t, s, calls)

	terminate := func(pid int32) {
		t.Helper()
		var ok bool
		if err := admin.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
			t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
		}
	}
	terminate(plugPid)
	if err := <-plugErr; !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Fatalf("plug whose backend was terminated: %v, want ErrStoreUnavailable", err)
	}
	// The three operations now run as one batch, which blocks on "held".
	var batchPid int32
	deadline := time.Now().Add(30 * time.Second)
	for batchPid == 0 || batchPid == plugPid {
		if time.Now().After(deadline) {
			t.Fatal("the second batch never blocked")
		}
		batchPid = waitForBlockedBackend(t, admin, schema)
	}
	terminate(batchPid)
	for i, err := range wait() {
		if !errors.Is(err, retrysafe.ErrStoreUnavailable) || errors.Is(err, context.Canceled) {
			t.Errorf("operation %d of the terminated batch: %v, want ErrStoreUnavailable", i, err)
		}
	}
	release()
	// Nothing of the terminated batch took effect.
	if _, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "fresh", Now: at(0)}); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Errorf("fresh after the terminated batch: %v, want ErrNotFound", err)
	}
	if rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "owned", Now: at(0)}); err != nil || rec.State != retrysafe.StateProcessing {
		t.Errorf("owned after the terminated batch: %+v, %v; want still processing", rec, err)
	}
	// The store works on.
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "owned", Token: owned.Token, Now: at(0), TTL: ttl, Response: &retrysafe.Response{Status: 200}}); err != nil {
		t.Fatalf("Complete after the terminated batch: %v", err)
	}
	for _, k := range []string{"fresh", "held", "plug"} {
		if res := mustClaim(t, s, claimP(k, fpA, at(0))); !res.Claimed {
			t.Errorf("claim of %s after the terminated batch lost", k)
		}
	}
}

// TestBatchDoesNotWaitForHeldRow: a row held by another transaction (an
// uncommitted CompleteTx) does not hold up the batch: the extension of that
// row runs alone and waits, while the claims batched with it are answered.
func TestBatchDoesNotWaitForHeldRow(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := newBatchStore(t, sharedPool(t), schema)
	ctx := t.Context()
	p := claimP("held", fpA, at(0))
	mustClaim(t, s, p)
	tx, err := sharedPool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if err := s.CompleteTx(ctx, tx, &retrysafe.CompleteParams{Scope: scope, Key: "held", Token: p.Token, Now: at(0), TTL: ttl, Response: &retrysafe.Response{Status: 200}}); err != nil {
		t.Fatal(err)
	}

	release := holdKeys(t, schema, "plug")
	plugErr, _ := plug(t, s, schema)
	extendErr := make(chan error, 1)
	go func() {
		extendErr <- s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope, Key: "held", Token: p.Token, Now: at(0), Lease: lease})
	}()
	batchtest.WaitQueued(t, s, 1)
	var calls []func() error
	for i := range 5 {
		calls = append(calls, func() error {
			res, err := s.Claim(ctx, claimP(fmt.Sprint("other-", i), fpA, at(0)))
			if err == nil && !res.Claimed {
				err = errors.New("not claimed")
			}
			return err
		})
	}
	errs := make(chan error, len(calls))
	for i, call := range calls {
		go func() { errs <- call() }()
		batchtest.WaitQueued(t, s, i+2)
	}
	release()
	if err := <-plugErr; err != nil {
		t.Fatalf("plug: %v", err)
	}
	for range calls {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("claim batched with the held row: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("claims batched with a row another transaction holds waited for that transaction")
		}
	}
	select {
	case err := <-extendErr:
		t.Fatalf("Extend of the held row returned %v while the row is held", err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-extendErr; !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("Extend after the CompleteTx committed: %v, want ErrLeaseLost", err)
	}
}

// TestBatchAbandoned: when every caller of a running batch gives up, the
// batch is abandoned: the caller returns its context's error while the
// batch's statement is still blocked (a caller whose item started would
// otherwise wait for the batch's outcome, which cannot come while the key
// is held). As with any statement cut by its context, whether the claim
// took effect is unknown; the store goes on working.
func TestBatchAbandoned(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := newBatchStore(t, sharedPool(t), schema)
	release := holdKeys(t, schema, "k")
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Claim(ctx, claimP("k", fpA, at(0)))
		errc <- err
	}()
	waitForBlockedBackend(t, sharedPool(t), schema)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim abandoned in its batch: %v, want context.Canceled", err)
	}
	release()
	if _, err := s.Claim(t.Context(), claimP("k", fpA, at(0))); err != nil {
		t.Fatalf("Claim after the abandoned batch: %v", err)
	}
	if res := mustClaim(t, s, claimP("other", fpA, at(0))); !res.Claimed {
		t.Fatal("claim of another key after the abandoned batch lost")
	}
}

// TestClosedStoreFailsOperations: after Close, batched operations fail with
// ErrStoreUnavailable.
func TestClosedStoreFailsOperations(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	s.Close()
	if _, err := s.Claim(t.Context(), claimP("k", fpA, at(0))); !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Fatalf("Claim after Close: %v, want ErrStoreUnavailable", err)
	}
}

// TestBatchesInFlight: with the default BatchesInFlight (2), an operation
// sent while a batch is held in PostgreSQL runs in a second batch at once.
func TestBatchesInFlight(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := newStoreOn(t, sharedPool(t), schema)
	release := holdKeys(t, schema, "plug")
	plugErr, _ := plug(t, s, schema)
	if res := mustClaim(t, s, claimP("other", fpA, at(0))); !res.Claimed {
		t.Fatal("claim beside a held batch not claimed")
	}
	select {
	case err := <-plugErr:
		t.Fatalf("the plug returned %v while its key is held", err)
	default:
	}
	release()
	if err := <-plugErr; err != nil {
		t.Fatalf("plug: %v", err)
	}
}

// TestBatchEveryOutcome: one batch holding a claim in every state of its
// key and every fenced operation, won and lost. Each caller gets the
// answer its single statement would give; the takeovers, which the batch
// leaves to the claim function, are counted as run alone.
func TestBatchEveryOutcome(t *testing.T) {
	t.Parallel()
	// The batch's arguments are encoded from the operations in the exec
	// modes that describe the statement (pgx's default, cache_statement,
	// and cache_describe) and passed as plain slices in exec mode.
	for _, mode := range []string{"cache_statement", "cache_describe", "exec"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testBatchEveryOutcome(t, poolWithExecMode(t, mode))
		})
	}
}

// poolWithExecMode returns a pool of its own whose connections use pgx's
// exec mode named as default_query_exec_mode takes it.
func poolWithExecMode(t *testing.T, mode string) *pgxpool.Pool {
	t.Helper()
	sharedPool(t) // skip early when the server is unreachable
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]pgx.QueryExecMode{"cache_statement": pgx.QueryExecModeCacheStatement,
		"cache_describe": pgx.QueryExecModeCacheDescribe, "exec": pgx.QueryExecModeExec}
	cfg.ConnConfig.DefaultQueryExecMode = modes[mode]
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func testBatchEveryOutcome(t *testing.T, pool *pgxpool.Pool) {
	schema := newSchema(t)
	s := newBatchStore(t, pool, schema)
	ctx := t.Context()
	resp := &retrysafe.Response{Status: 201, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("created")}
	complete := func(key, token string, now time.Time) error {
		return s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: key, Token: token, Now: now, TTL: ttl, Response: resp})
	}
	now := at(lease + time.Second) // the batch's time
	// Before the batch:
	live := mustClaim(t, s, claimP("live", fpA, at(lease)))          // lease still live at now
	done := mustClaim(t, s, claimP("done", fpA, at(0)))              // completed: a replay
	stale := mustClaim(t, s, claimP("stale", fpA, at(0)))            // lease run out at now: takeover
	old := mustClaim(t, s, claimP("old", fpA, at(-ttl-time.Minute))) // completed, expired at now
	mine := mustClaim(t, s, claimP("mine", fpA, at(lease)))          // completed in the batch
	rel := mustClaim(t, s, claimP("rel", fpA, at(lease)))            // released in the batch
	ext := mustClaim(t, s, claimP("ext", fpA, at(lease)))            // extended in the batch
	foreign := mustClaim(t, s, claimP("foreign", fpA, at(lease)))    // completed in the batch by a non-owner
	if err := complete("done", done.Record.Token, at(0)); err != nil {
		t.Fatal(err)
	}
	if err := complete("old", old.Record.Token, at(-ttl-time.Minute)); err != nil {
		t.Fatal(err)
	}

	release := holdKeys(t, schema, "plug")
	plugErr, _ := plug(t, s, schema)
	before := s.BatchStats()
	claims := map[string]*retrysafe.ClaimParams{
		"new": claimP("new", fpA, now), "live": claimP("live", fpB, now), "done": claimP("done", fpA, now),
		"stale": claimP("stale", fpA, now), "old": claimP("old", fpB, now),
	}
	order := []string{"new", "live", "done", "stale", "old"}
	got := make(map[string]*retrysafe.ClaimResult)
	var mu sync.Mutex
	var calls []func() error
	for _, k := range order {
		calls = append(calls, func() error {
			res, err := s.Claim(ctx, claims[k])
			mu.Lock()
			got[k] = res
			mu.Unlock()
			return err
		})
	}
	fencedOps := []struct {
		name string
		call func() error
		want error
	}{
		{"complete mine", func() error { return complete("mine", mine.Record.Token, now) }, nil},
		{"release rel", func() error {
			return s.Release(ctx, &retrysafe.ReleaseParams{Scope: scope, Key: "rel", Token: rel.Record.Token})
		}, nil},
		{"extend ext", func() error {
			return s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope, Key: "ext", Token: ext.Record.Token, Now: now, Lease: lease})
		}, nil},
		{"complete absent", func() error { return complete("absent-c", "tok", now) }, retrysafe.ErrLeaseLost},
		{"complete foreign", func() error { return complete("foreign", live.Record.Token, now) }, retrysafe.ErrLeaseLost},
		{"release absent", func() error {
			return s.Release(ctx, &retrysafe.ReleaseParams{Scope: scope, Key: "absent-r", Token: "tok"})
		}, retrysafe.ErrLeaseLost},
		{"extend absent", func() error {
			return s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope, Key: "absent-e", Token: "tok", Now: now, Lease: lease})
		}, retrysafe.ErrLeaseLost},
	}
	for _, op := range fencedOps {
		calls = append(calls, op.call)
	}
	wait := batchtest.SendInOrder(t, s, calls)
	release()
	if err := <-plugErr; err != nil {
		t.Fatalf("plug: %v", err)
	}
	errs := wait()
	for i, k := range order {
		if errs[i] != nil {
			t.Fatalf("claim %s: %v", k, errs[i])
		}
	}
	for j, op := range fencedOps {
		if err := errs[len(order)+j]; !errors.Is(err, op.want) || (op.want == nil && err != nil) {
			t.Errorf("%s: %v, want %v", op.name, err, op.want)
		}
	}
	after := s.BatchStats()
	batchtest.OneBatch(t, before, after, len(calls))
	batchtest.Alone(t, before, after, 2, "the takeover of stale and the replacement of old")

	if r := got["new"]; !r.Claimed || r.Record.Attempt != 1 || r.Record.Token != claims["new"].Token || !r.Record.CreatedAt.Equal(now) {
		t.Errorf("new key: claimed=%v %+v", r.Claimed, r.Record)
	}
	if r := got["live"]; r.Claimed || r.Record.Token != live.Record.Token || r.Record.State != retrysafe.StateProcessing {
		t.Errorf("live lease, other fingerprint: claimed=%v %+v, want the live record", r.Claimed, r.Record)
	}
	if r := got["done"]; r.Claimed || r.Record.State != retrysafe.StateCompleted || r.Record.Response == nil ||
		string(r.Record.Response.Body) != "created" {
		t.Errorf("replay: claimed=%v %+v, want the completed record", r.Claimed, r.Record)
	}
	if r := got["stale"]; !r.Claimed || r.Record.Attempt != 2 || r.Record.Token != claims["stale"].Token ||
		!r.Record.CreatedAt.Equal(stale.Record.CreatedAt) {
		t.Errorf("takeover: claimed=%v %+v, want attempt 2 keeping CreatedAt", r.Claimed, r.Record)
	}
	if r := got["old"]; !r.Claimed || r.Record.Attempt != 1 || r.Record.Fingerprint != fpB || !r.Record.CreatedAt.Equal(now) ||
		r.Record.Response != nil {
		t.Errorf("expired record replaced: claimed=%v %+v, want a fresh record", r.Claimed, r.Record)
	}
	get := func(key string) *retrysafe.Record {
		rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: key, Now: now})
		if errors.Is(err, retrysafe.ErrNotFound) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	if r := get("mine"); r == nil || r.State != retrysafe.StateCompleted || r.Response == nil || r.Response.Status != 201 ||
		string(r.Response.Body) != "created" || r.Response.Header.Get("Content-Type") != "text/plain" || !r.ExpiresAt.Equal(now.Add(ttl)) {
		t.Errorf("mine after its completion: %+v", r)
	}
	if r := get("rel"); r != nil {
		t.Errorf("rel after its release: %+v, want no record", r)
	}
	if r := get("ext"); r == nil || !r.LeaseUntil.Equal(now.Add(lease)) || !r.UpdatedAt.Equal(now) {
		t.Errorf("ext after its extension: %+v, want the lease until %v", r, now.Add(lease))
	}
	if r := get("foreign"); r == nil || r.State != retrysafe.StateProcessing || r.Token != foreign.Record.Token {
		t.Errorf("foreign after a non-owner's completion: %+v, want its owner's processing record", r)
	}
	for _, k := range []string{"absent-c", "absent-r", "absent-e"} {
		if r := get(k); r != nil {
			t.Errorf("%s: a lost operation left a record: %+v", k, r)
		}
	}
}
