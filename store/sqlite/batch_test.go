package sqlite_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// pauses backs the SQL function retrysafe_test_pause(name), which a test's
// trigger calls to hold a write in the middle of its statement: it signals
// entered and waits for release.
var pauses sync.Map // name -> *pause

type pause struct{ entered, release chan struct{} }

func init() {
	msqlite.MustRegisterScalarFunction("retrysafe_test_pause", 1,
		func(_ *msqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
			name, _ := args[0].(string)
			if p, ok := pauses.Load(name); ok {
				close(p.(*pause).entered)
				<-p.(*pause).release
			}
			return nil, nil
		})
}

// openBatchStore opens a Store with a long busy timeout (its writer waits
// behind a lock the test holds) and a plain *sql.DB on the same file.
func openBatchStore(t *testing.T) (*sqlite.Store, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "batch.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Config{BusyTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	plain, err := sql.Open("sqlite", sqlite.DSN(path, sqlite.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	return s, plain
}

// holdWriteLock takes SQLite's write lock on a connection of db and
// returns the function that commits (and so releases) it.
func holdWriteLock(t *testing.T, db *sql.DB) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unlock = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
				t.Errorf("COMMIT of the test's lock: %v", err)
			}
			conn.Close()
		})
	}
	t.Cleanup(unlock)
	return unlock
}

// waitFor polls cond until it holds (a synchronisation, not a timing
// assertion: the bound is only there so a bug fails instead of hanging).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// receive returns the value sent on ch (with a bound, as waitFor, so that
// a bug fails instead of hanging).
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// plugWriter sends one write (a claim of key "plug") to s and holds it in
// the middle of its statement, with a trigger that pauses it, until the
// returned unlock is called. Once the plug's statement has started the
// writer is in the plug's batch, which has been taken and holds only the
// plug, so every write sent next queues into one next batch. It returns
// the function that lets the plug go on and the channel that receives the
// plug's error.
func plugWriter(t *testing.T, s *sqlite.Store, plain *sql.DB) (unlock func(), plugErr <-chan error) {
	t.Helper()
	name := t.Name() + "/plug"
	p := &pause{entered: make(chan struct{}), release: make(chan struct{})}
	pauses.Store(name, p)
	if _, err := plain.ExecContext(context.Background(), `CREATE TRIGGER plug AFTER INSERT ON retrysafe_records
WHEN NEW.idem_key = 'plug'
BEGIN SELECT retrysafe_test_pause('`+name+`'); END`); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unlock = func() { once.Do(func() { close(p.release) }) }
	t.Cleanup(func() { unlock(); pauses.Delete(name) })
	errc := make(chan error, 1)
	go func() {
		_, err := s.Claim(context.Background(), claimParams("plug", "fp", base))
		errc <- err
	}()
	<-p.entered
	return unlock, errc
}

// sendAll runs each call on its own goroutine, waits until want writes are
// queued behind the plug, lets the plug go on and returns the calls'
// errors.
func sendAll(t *testing.T, s *sqlite.Store, unlock func(), want int, calls []func() error) []error {
	t.Helper()
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Go(func() { errs[i] = call() })
	}
	waitFor(t, fmt.Sprintf("%d writes are queued", want), func() bool {
		return s.QueuedWrites() == want
	})
	unlock()
	wg.Wait()
	return errs
}

func completeCall(s *sqlite.Store, p *retrysafe.ClaimParams) func() error {
	return func() error { return s.Complete(context.Background(), completeParams(p, base, "done "+p.Key)) }
}

func stateOf(t *testing.T, s *sqlite.Store, key string) retrysafe.State {
	t.Helper()
	rec, err := s.Get(context.Background(), &retrysafe.GetParams{Scope: "tenant", Key: key, Now: base})
	if errors.Is(err, retrysafe.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	return rec.State
}

// TestBatchesForm: concurrent new keys (claim, then complete) share
// commits: the writer commits more than one write per transaction on
// average, and every write is answered and durable.
func TestBatchesForm(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	const goroutines, rounds = 48, 10
	b0, o0 := s.BatchCounts()
	for round := range rounds {
		start := make(chan struct{})
		var ready, done sync.WaitGroup
		errs := make([]error, goroutines)
		for i := range goroutines {
			ready.Add(1)
			done.Go(func() {
				ready.Done()
				<-start
				p := claimParams(fmt.Sprintf("r%d-g%d", round, i), "fp", base)
				res, err := s.Claim(ctx, p)
				if err != nil || !res.Claimed {
					errs[i] = fmt.Errorf("Claim: %v, %v", res, err)
					return
				}
				errs[i] = s.Complete(ctx, completeParams(p, base, "ok"))
			})
		}
		ready.Wait()
		close(start)
		done.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, goroutine %d: %v", round, i, err)
			}
		}
	}
	b1, o1 := s.BatchCounts()
	batches, ops := b1-b0, o1-o0
	if ops != 2*goroutines*rounds {
		t.Fatalf("%d writes committed, want %d", ops, 2*goroutines*rounds)
	}
	if ops <= batches {
		t.Fatalf("%d writes in %d batches: no batch held more than one write", ops, batches)
	}
	t.Logf("%d writes in %d batches (%.1f per batch)", ops, batches, float64(ops)/float64(batches))
	recs, err := s.List(ctx, &admin.ListParams{Limit: 1000})
	if err != nil || len(recs) != goroutines*rounds {
		t.Fatalf("List: %d records, %v; want %d", len(recs), err, goroutines*rounds)
	}
	for _, r := range recs {
		if r.State != retrysafe.StateCompleted {
			t.Fatalf("record %s is %s, want completed", r.Key, r.State)
		}
	}
}

// TestBatchOneWriteFails: in one batch, a completion that a trigger
// fails fails alone (the batch runs again without it, so none of it
// stays); the batch's other writes commit.
func TestBatchOneWriteFails(t *testing.T) {
	t.Parallel()
	s, plain := openBatchStore(t)
	ctx := context.Background()
	// RAISE(FAIL) in an AFTER trigger ends the statement with an error but
	// keeps the row it already updated: only rolling back undoes it.
	if _, err := plain.ExecContext(ctx, `CREATE TRIGGER poison AFTER UPDATE ON retrysafe_records
WHEN NEW.idem_key = 'poison' AND NEW.state = 'completed'
BEGIN SELECT RAISE(FAIL, 'poisoned completion'); END`); err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "poison", "c", "d"}
	var calls []func() error
	for _, k := range keys {
		p := claimParams(k, "fp", base)
		mustClaim(t, s, p)
		calls = append(calls, completeCall(s, p))
	}
	// A claim of a new key and a claim of the poisoned key in the same
	// batch: they are unaffected too.
	calls = append(calls, func() error {
		res, err := s.Claim(ctx, claimParams("new", "fp", base))
		if err == nil && !res.Claimed {
			err = errors.New("claim of a new key not claimed")
		}
		return err
	})
	b0, o0 := s.BatchCounts()
	unlock, plugErr := plugWriter(t, s, plain)
	errs := sendAll(t, s, unlock, len(calls), calls)
	if err := <-plugErr; err != nil {
		t.Fatalf("plug: %v", err)
	}
	for i, err := range errs {
		if i == 2 { // poison
			if !errors.Is(err, retrysafe.ErrStoreUnavailable) || !strings.Contains(err.Error(), "poisoned completion") {
				t.Errorf("poisoned Complete: %v, want ErrStoreUnavailable with the trigger's message", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("write %d in the poisoned batch: %v", i, err)
		}
	}
	b1, o1 := s.BatchCounts()
	// The poisoned write started (and failed, and left the batch), so it
	// counts among the writes the second batch ran.
	if b1-b0 != 2 || o1-o0 != int64(len(calls))+1 {
		t.Errorf("%d writes in %d batches, want the plug alone, then the %d writes in one batch", o1-o0, b1-b0, len(calls))
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		if st := stateOf(t, s, k); st != retrysafe.StateCompleted {
			t.Errorf("%s is %q, want completed", k, st)
		}
	}
	if st := stateOf(t, s, "poison"); st != retrysafe.StateProcessing {
		t.Errorf("poison is %q, want still processing", st)
	}
	if st := stateOf(t, s, "new"); st != retrysafe.StateProcessing {
		t.Errorf("new is %q, want processing", st)
	}
}

// TestBatchSameKeyClaims: claims of one key queued into one batch behave
// as if serialised: the first wins, the others see its record.
func TestBatchSameKeyClaims(t *testing.T) {
	t.Parallel()
	s, plain := openBatchStore(t)
	const n = 20
	params := make([]*retrysafe.ClaimParams, n)
	results := make([]*retrysafe.ClaimResult, n)
	calls := make([]func() error, n)
	for i := range n {
		params[i] = claimParams("same", "fp", base)
		calls[i] = func() (err error) {
			results[i], err = s.Claim(context.Background(), params[i])
			return err
		}
	}
	b0, o0 := s.BatchCounts()
	unlock, plugErr := plugWriter(t, s, plain)
	errs := sendAll(t, s, unlock, n, calls)
	if err := <-plugErr; err != nil {
		t.Fatalf("plug: %v", err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
	}
	if b1, o1 := s.BatchCounts(); b1-b0 != 2 || o1-o0 != n+1 {
		t.Errorf("%d writes in %d batches, want the plug alone, then the %d claims in one batch", o1-o0, b1-b0, n)
	}
	winner := -1
	for i, res := range results {
		if res.Claimed {
			if winner >= 0 {
				t.Fatalf("claims %d and %d both won", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("nobody won")
	}
	for i, res := range results {
		if res.Record.Token != params[winner].Token || res.Record.State != retrysafe.StateProcessing {
			t.Errorf("claim %d saw %+v, want the winner's processing record", i, res.Record)
		}
	}
}

// TestBatchCancelWhileQueued: a write whose context ends while it is
// queued returns the context's error at once, without waiting for the
// batch, and is not run; the batch's other writes commit.
func TestBatchCancelWhileQueued(t *testing.T) {
	t.Parallel()
	s, plain := openBatchStore(t)
	ctx := context.Background()
	unlock, plugErr := plugWriter(t, s, plain)

	cctx, cancel := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() {
		_, err := s.Claim(cctx, claimParams("cancelled", "fp", base))
		cancelled <- err
	}()
	kept := make(chan error, 1)
	go func() {
		_, err := s.Claim(ctx, claimParams("kept", "fp", base))
		kept <- err
	}()
	waitFor(t, "both claims are queued", func() bool { return s.QueuedWrites() == 2 })
	b0, o0 := s.BatchCounts()
	cancel()
	// The lock is still held: the cancelled claim answers while queued.
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled queued Claim: %v, want context.Canceled", err)
	}
	unlock()
	if err := <-plugErr; err != nil {
		t.Fatalf("plug: %v", err)
	}
	if err := <-kept; err != nil {
		t.Fatalf("Claim queued beside the cancelled one: %v", err)
	}
	if b1, o1 := s.BatchCounts(); o1-o0 != 2 { // plug + kept
		t.Errorf("%d writes committed in %d batches, want 2 (the cancelled claim skipped)", o1-o0, b1-b0)
	}
	if st := stateOf(t, s, "cancelled"); st != "" {
		t.Errorf("cancelled claim left a %q record, want none", st)
	}
	if st := stateOf(t, s, "kept"); st != retrysafe.StateProcessing {
		t.Errorf("kept is %q, want processing", st)
	}
}

// TestBatchCommitFails: when the batch's COMMIT fails (here a deferred
// foreign key that one write's trigger violates), every write of the batch
// fails with ErrStoreUnavailable, none of them took effect, and the store
// goes on working.
func TestBatchCommitFails(t *testing.T) {
	t.Parallel()
	s, plain := openBatchStore(t)
	ctx := context.Background()
	if _, err := plain.ExecContext(ctx, `
CREATE TABLE parent (id INTEGER PRIMARY KEY);
CREATE TABLE child (pid INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);
CREATE TRIGGER fail_commit AFTER UPDATE ON retrysafe_records
WHEN NEW.idem_key = 'fail-commit' AND NEW.state = 'completed'
BEGIN INSERT INTO child (pid) VALUES (42); END`); err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "fail-commit", "c"}
	claims := map[string]*retrysafe.ClaimParams{}
	var calls []func() error
	for _, k := range keys {
		claims[k] = claimParams(k, "fp", base)
		mustClaim(t, s, claims[k])
		calls = append(calls, completeCall(s, claims[k]))
	}
	calls = append(calls, func() error {
		_, err := s.Claim(ctx, claimParams("new", "fp", base))
		return err
	})
	b0, o0 := s.BatchCounts()
	unlock, plugErr := plugWriter(t, s, plain)
	errs := sendAll(t, s, unlock, len(calls), calls)
	if err := <-plugErr; err != nil {
		t.Fatalf("plug: %v", err)
	}
	for i, err := range errs {
		if !errors.Is(err, retrysafe.ErrStoreUnavailable) {
			t.Errorf("write %d of the batch whose COMMIT failed: %v, want ErrStoreUnavailable", i, err)
		}
		if i == 0 {
			t.Logf("write 0 of the batch whose COMMIT failed: %v", err)
		}
	}
	if b1, o1 := s.BatchCounts(); b1-b0 != 2 || o1-o0 != int64(len(calls))+1 {
		t.Errorf("%d writes in %d batches, want the plug alone, then the %d writes in one batch", o1-o0, b1-b0, len(calls))
	}
	for _, k := range keys {
		if st := stateOf(t, s, k); st != retrysafe.StateProcessing {
			t.Errorf("%s is %q after the failed COMMIT, want still processing", k, st)
		}
	}
	if st := stateOf(t, s, "new"); st != "" {
		t.Errorf("new is %q after the failed COMMIT, want absent", st)
	}
	if n := countRows(t, plain, `SELECT COUNT(*) FROM child`); n != 0 {
		t.Errorf("%d child rows after the failed COMMIT, want 0", n)
	}
	// No connection was left in a transaction: the store keeps working.
	for i := range 4 {
		for _, k := range []string{"a", "b", "c"} {
			p := claims[k]
			if i > 0 {
				p = claimParams(fmt.Sprint(k, i), "fp", base)
				mustClaim(t, s, p)
			}
			if err := completeCall(s, p)(); err != nil {
				t.Fatalf("Complete %s after the failed batch: %v", p.Key, err)
			}
		}
	}
	if n, err := s.Sweep(ctx, &admin.SweepParams{Now: base.Add(2 * time.Hour)}); err != nil || n != 12 {
		t.Fatalf("Sweep after the failed batch = %d, %v; want 12", n, err)
	}
}

// TestBatchCancelWhileBatchWaits: a write taken into a batch that is
// still waiting for the write lock has not started; its caller may give
// up, and the write is not run.
func TestBatchCancelWhileBatchWaits(t *testing.T) {
	t.Parallel()
	s, plain := openBatchStore(t)
	ctx := context.Background()
	unlock := holdWriteLock(t, plain)
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Claim(cctx, claimParams("waiting", "fp", base))
		errc <- err
	}()
	// The writer takes a connection once it has taken the claim into a
	// batch (no write came before), and then waits in BEGIN IMMEDIATE.
	waitFor(t, "the writer takes the claim", func() bool { return s.DB().Stats().InUse == 1 })
	b0, o0 := s.BatchCounts()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim cancelled while its batch waits for the lock: %v, want context.Canceled", err)
	}
	unlock()
	// The writer's empty transaction ended: the next write commits.
	if res := mustClaim(t, s, claimParams("after", "fp", base)); !res.Claimed {
		t.Fatal("claim after the abandoned batch not claimed")
	}
	if b1, o1 := s.BatchCounts(); b1-b0 != 1 || o1-o0 != 1 {
		t.Errorf("%d writes in %d batches, want 1 in 1 (the abandoned batch committed nothing)", o1-o0, b1-b0)
	}
	if st := stateOf(t, s, "waiting"); st != "" {
		t.Errorf("cancelled claim left a %q record, want none", st)
	}
}

// TestBatchStartedWriteAnswersOutcome: a write whose statement has started
// when its caller's context ends runs to the end of its batch, and the call
// returns its outcome (here: success, the completion committed), not the
// context's error.
func TestBatchStartedWriteAnswersOutcome(t *testing.T) {
	t.Parallel()
	s, plain := openBatchStore(t)
	ctx := context.Background()
	p := &pause{entered: make(chan struct{}), release: make(chan struct{})}
	pauses.Store(t.Name(), p)
	t.Cleanup(func() { pauses.Delete(t.Name()) })
	if _, err := plain.ExecContext(ctx, `CREATE TRIGGER pause_completion BEFORE UPDATE ON retrysafe_records
WHEN NEW.idem_key = 'slow' AND NEW.state = 'completed'
BEGIN SELECT retrysafe_test_pause('`+t.Name()+`'); END`); err != nil {
		t.Fatal(err)
	}
	cp := claimParams("slow", "fp", base)
	mustClaim(t, s, cp)

	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- s.Complete(cctx, completeParams(cp, base, "slow")) }()
	<-p.entered // the completion's UPDATE is running
	cancel()
	select {
	case err := <-errc:
		t.Fatalf("Complete returned %v while its statement was still running", err)
	default:
	}
	close(p.release)
	if err := <-errc; err != nil {
		t.Fatalf("Complete whose context ended after its statement started: %v, want its outcome (nil)", err)
	}
	if st := stateOf(t, s, "slow"); st != retrysafe.StateCompleted {
		t.Fatalf("slow is %q, want completed", st)
	}
}

// newLingeringStore returns a Store from New on a fresh file, whose idle
// writer would keep its connection for an hour, and its *sql.DB.
func newLingeringStore(t *testing.T, maxConns int) (*sqlite.Store, *sql.DB) {
	t.Helper()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "linger.db"), sqlite.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(maxConns)
	s, err := sqlite.New(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.SetWriter(time.Hour, nil)
	t.Cleanup(func() { s.Close() })
	return s, db
}

// TestWriterConnReleasedOnClose: the writer keeps its connection between
// batches, and Close makes an idle writer give it back at once instead of
// after its linger: when Close returns, the connection is back in the pool.
func TestWriterConnReleasedOnClose(t *testing.T) {
	t.Parallel()
	s, db := newLingeringStore(t, 0)
	mustClaim(t, s, claimParams("k", "fp", base))
	if n := db.Stats().InUse; n != 1 {
		t.Fatalf("%d connections in use after a write, want 1 (the idle writer's)", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := db.Stats().InUse; n != 0 {
		t.Fatalf("%d connections in use after Close, want 0", n)
	}
}

// TestWriteAfterClose: after Close, writes fail with ErrStoreUnavailable
// and change nothing, even on the caller's *sql.DB (which Close leaves
// open, so reads go on).
func TestWriteAfterClose(t *testing.T) {
	t.Parallel()
	s, _ := newLingeringStore(t, 0)
	p := claimParams("k", "fp", base)
	mustClaim(t, s, p)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(context.Background(), claimParams("after", "fp", base)); !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Errorf("Claim after Close: %v, want ErrStoreUnavailable", err)
	}
	if err := s.Complete(context.Background(), completeParams(p, base, "done")); !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Errorf("Complete after Close: %v, want ErrStoreUnavailable", err)
	}
	if st := stateOf(t, s, "k"); st != retrysafe.StateProcessing {
		t.Errorf("k is %q after a Complete after Close, want still processing", st)
	}
	if st := stateOf(t, s, "after"); st != "" {
		t.Errorf("a Claim after Close left a %q record, want none", st)
	}
}

// TestCloseFailsQueuedWrites: Close fails the writes still queued with
// ErrStoreUnavailable at once (they change nothing), and waits for the
// batch that is running, whose write commits.
func TestCloseFailsQueuedWrites(t *testing.T) {
	t.Parallel()
	s, plain := openBatchStore(t)
	unlock, plugErr := plugWriter(t, s, plain)
	queued := make(chan error, 1)
	go func() {
		_, err := s.Claim(context.Background(), claimParams("queued", "fp", base))
		queued <- err
	}()
	waitFor(t, "the claim is queued", func() bool { return s.QueuedWrites() == 1 })
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// The plug is still running: the queued claim is answered anyway.
	if err := receive(t, "the answer of the claim queued at Close", queued); !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Fatalf("Claim queued at Close: %v, want ErrStoreUnavailable", err)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a batch was running", err)
	default:
	}
	unlock()
	if err := <-plugErr; err != nil {
		t.Fatalf("the write running at Close: %v, want its outcome (nil)", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, plain, `SELECT COUNT(*) FROM retrysafe_records WHERE idem_key = 'plug'`); n != 1 {
		t.Errorf("%d plug records, want 1 (the batch running at Close committed)", n)
	}
	if n := countRows(t, plain, `SELECT COUNT(*) FROM retrysafe_records WHERE idem_key = 'queued'`); n != 0 {
		t.Errorf("%d records of the claim queued at Close, want 0", n)
	}
}

// TestWriterSmallPool: on a *sql.DB limited to one connection the idle
// writer does not keep it, so the caller's own queries and transactions
// (and the Store's reads) are not held up.
func TestWriterSmallPool(t *testing.T) {
	t.Parallel()
	s, db := newLingeringStore(t, 1)
	p := claimParams("k", "fp", base)
	mustClaim(t, s, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("BeginTx on the one-connection pool after a write: %v", err)
	}
	if err := s.CompleteTx(ctx, tx, completeParams(p, base, "done")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, s, "k"); st != retrysafe.StateCompleted {
		t.Fatalf("k is %q, want completed", st)
	}
	if err := s.Release(ctx, &retrysafe.ReleaseParams{Scope: p.Scope, Key: p.Key, Token: p.Token}); !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("Release of a completed record: %v, want ErrLeaseLost", err)
	}
}

// TestWriterRestarts: with a writer that exits as soon as it is idle,
// writes from a few goroutines keep ending one writer goroutine and
// starting the next (each goroutine waits, now and then, until a writer
// has exited after its write); each hands the connection over cleanly
// (the race detector checks) and every write commits.
func TestWriterRestarts(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	var exits atomic.Int64
	s.SetWriter(time.Nanosecond, func() { exits.Add(1) })
	const goroutines, rounds = 4, 100
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*rounds)
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				e := exits.Load()
				p := claimParams(fmt.Sprintf("g%d-%d", g, i), "fp", base)
				if _, err := s.Claim(context.Background(), p); err != nil {
					errs <- err
					return
				}
				if i%7 == 0 {
					// The writer exits once no goroutine writes: every
					// goroutine ends up here or done.
					deadline := time.Now().Add(30 * time.Second)
					for exits.Load() == e {
						if time.Now().After(deadline) {
							errs <- errors.New("timed out waiting for the writer to exit")
							return
						}
						time.Sleep(10 * time.Microsecond)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := exits.Load(); n < (rounds+6)/7 {
		t.Errorf("the writer exited %d times, want at least %d", n, (rounds+6)/7)
	}
	recs, err := s.List(context.Background(), &admin.ListParams{Limit: 1000})
	if err != nil || len(recs) != goroutines*rounds {
		t.Fatalf("List: %d records, %v; want %d", len(recs), err, goroutines*rounds)
	}
}
