package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/batchtest"
	"github.com/retrysafe/retrysafe/store/mysql"
)

const fpB = "fp-b"

// holdKeys inserts processing rows for keys in a transaction that stays
// open (uncommitted) until the returned function rolls it back: a claim
// of one of those keys waits inside the claim procedure, and a batch
// leaves a fenced operation on one of them alone.
func holdKeys(t *testing.T, table string, keys ...string) (rollback func()) {
	t.Helper()
	holder, err := sharedDB(t).BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := holder.ExecContext(t.Context(), "INSERT INTO `"+table+"` (scope, idem_key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns)"+
			" VALUES (?, ?, 'x', 'processing', 'holder', 1, 0, 0, 0)", scope, k); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	rollback = func() {
		once.Do(func() {
			if err := holder.Rollback(); err != nil {
				t.Errorf("rollback of the holder: %v", err)
			}
		})
	}
	t.Cleanup(rollback)
	return rollback
}

// waitForLockWait waits until a session runs an INSERT into table that
// does not finish (the claim procedure's, waiting for a row lock that
// holdKeys holds), and returns its connection id. (PROCESSLIST only: on
// MariaDB, INNODB_TRX's trx_query is not the statement a procedure runs.)
// A failed look is retried: information_schema's temporary tables come
// and go with the server's tmpdir.
func waitForLockWait(t *testing.T, table string, not ...int64) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows, err := sharedDB(t).QueryContext(t.Context(), "SELECT ID FROM information_schema.PROCESSLIST"+
			" WHERE COMMAND = 'Execute' AND INFO LIKE ?", "INSERT INTO `"+table+"`%")
		var ids []int64
		if err == nil {
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			err = rows.Err()
			rows.Close()
		}
		if err != nil {
			t.Logf("looking for a lock wait: %v", err)
		}
		for _, id := range ids {
			if !containsID(not, id) {
				return id
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session waits for a row lock on %s", table)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func containsID(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// newBatchStore returns a migrated store that runs one batch at a time
// (BatchesInFlight 1), so that a plugged batch makes every operation sent
// next queue for one next batch.
func newBatchStore(t *testing.T, db *sql.DB, table string) *mysql.Store {
	t.Helper()
	s, err := mysql.New(db, mysql.Config{Table: table, BatchesInFlight: 1})
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
// waits until it blocks in the claim procedure: operations sent next
// queue for one next batch. It returns the plug's error channel and its
// connection id.
func plug(t *testing.T, s *mysql.Store, table string) (<-chan error, int64) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := s.Claim(context.Background(), claimP("plug", fpA, at(0)))
		errc <- err
	}()
	return errc, waitForLockWait(t, table)
}

// TestBatchSameKeyOperations: operations of one key in one batch behave
// as if run one after another, in the order they were sent: of twenty
// claims of an absent key the first wins and the others see its record; a
// completion and then a claim of the same key make the claim a replay; a
// takeover and then the old owner's completion make the completion fenced.
func TestBatchSameKeyOperations(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	s := newBatchStore(t, newDB(t, 4), table)
	ctx := t.Context()
	done := claimP("done", fpA, at(0))
	mustClaim(t, s, done)
	taken := claimP("taken", fpA, at(0))
	mustClaim(t, s, taken)
	resp := &retrysafe.Response{Status: 201, Body: []byte("created")}

	release := holdKeys(t, table, "plug")
	plugErr, _ := plug(t, s, table)
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
		// The owner completes after its lease ran out (fencing is by
		// token), and a retry whose plain read saw the expired lease (so
		// it queued) then finds the completed record.
		func() error {
			return s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "done", Token: done.Token, Now: at(lease), TTL: ttl, Response: resp})
		},
		func() (err error) { replay, err = s.Claim(ctx, claimP("done", fpA, at(lease+time.Second))); return err },
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
	table := newTable(t)
	s := newBatchStore(t, newDB(t, 4), table)
	ctx := t.Context()
	if _, err := sharedDB(t).ExecContext(ctx, "CREATE TRIGGER `"+table+"_poison` BEFORE UPDATE ON `"+table+"` FOR EACH ROW"+
		" BEGIN IF NEW.idem_key = 'poison' AND NEW.state = 'completed' THEN"+
		" SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'poisoned completion'; END IF; END"); err != nil {
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
	release := holdKeys(t, table, "plug")
	plugErr, _ := plug(t, s, table)
	before := s.BatchStats()
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
	after := s.BatchStats()
	if after.Batches-before.Batches != 2 || after.Alone-before.Alone != int64(len(calls)) {
		t.Errorf("%d batches, %d operations alone; want the plug and one batch, rolled back, whose %d operations ran alone",
			after.Batches-before.Batches, after.Alone-before.Alone, len(calls))
	}
	for key, want := range map[string]retrysafe.State{"a": retrysafe.StateCompleted, "b": retrysafe.StateCompleted,
		"c": retrysafe.StateCompleted, "poison": retrysafe.StateProcessing, "new": retrysafe.StateProcessing} {
		rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: key, Now: at(0)})
		if err != nil || rec.State != want {
			t.Errorf("%s: %+v, %v; want %s", key, rec, err, want)
		}
	}
}

// TestBatchConnectionKilled: a claim whose connection is killed (KILL, as
// a server restart would) while it waits fails with ErrStoreUnavailable;
// a batch whose connection is killed while it runs fails every operation
// it held with ErrStoreUnavailable, none of them took effect, and the next
// operations work.
func TestBatchConnectionKilled(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	s := newBatchStore(t, newDB(t, 4), table)
	ctx := t.Context()
	db := sharedDB(t)
	// A claim of "slow" sleeps in the batch, inside a trigger, until its
	// connection is killed.
	if _, err := db.ExecContext(ctx, "CREATE TRIGGER `"+table+"_slow` BEFORE INSERT ON `"+table+"` FOR EACH ROW"+
		" BEGIN IF NEW.idem_key = 'slow' THEN DO SLEEP(59.5); END IF; END"); err != nil {
		t.Fatal(err)
	}
	owned := claimP("owned", fpA, at(0))
	mustClaim(t, s, owned)

	release := holdKeys(t, table, "plug")
	plugErr, plugID := plug(t, s, table)
	calls := []func() error{
		func() error { _, err := s.Claim(ctx, claimP("fresh", fpA, at(0))); return err },
		func() error {
			return s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "owned", Token: owned.Token, Now: at(0), TTL: ttl, Response: &retrysafe.Response{Status: 200}})
		},
		// The claims' rows are inserted in key order: the batch has
		// inserted "fresh" when it sleeps on "slow".
		func() error { _, err := s.Claim(ctx, claimP("slow", fpA, at(0))); return err },
	}
	wait := batchtest.SendInOrder(t, s, calls)

	kill := func(id int64) {
		t.Helper()
		if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL %d", id)); err != nil {
			t.Fatalf("KILL %d: %v", id, err)
		}
	}
	kill(plugID)
	if err := <-plugErr; !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Fatalf("plug whose connection was killed: %v, want ErrStoreUnavailable", err)
	}
	// The three operations now run as one batch, which sleeps on "slow".
	var batchID int64
	deadline := time.Now().Add(30 * time.Second)
	for batchID == 0 {
		if time.Now().After(deadline) {
			rows, _ := db.QueryContext(ctx, "SELECT ID, COALESCE(STATE, ''), COALESCE(INFO, '') FROM information_schema.PROCESSLIST")
			for rows != nil && rows.Next() {
				var id int64
				var st, info string
				_ = rows.Scan(&id, &st, &info)
				t.Logf("session %d: %s: %.120s", id, st, info)
			}
			t.Fatal("the batch never slept")
		}
		time.Sleep(5 * time.Millisecond)
		err := db.QueryRowContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE STATE = 'User sleep' AND INFO = 'DO SLEEP(59.5)'").Scan(&batchID)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Logf("looking for the batch: %v", err) // retried, as in waitForLockWait
		}
	}
	kill(batchID)
	for i, err := range wait() {
		if !errors.Is(err, retrysafe.ErrStoreUnavailable) || errors.Is(err, context.Canceled) {
			t.Errorf("operation %d of the killed batch: %v, want ErrStoreUnavailable", i, err)
		}
	}
	release()
	// Nothing of the killed batch took effect.
	if _, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "fresh", Now: at(0)}); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Errorf("fresh after the killed batch: %v, want ErrNotFound", err)
	}
	if rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "owned", Now: at(0)}); err != nil || rec.State != retrysafe.StateProcessing {
		t.Errorf("owned after the killed batch: %+v, %v; want still processing", rec, err)
	}
	// The store works on.
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "owned", Token: owned.Token, Now: at(0), TTL: ttl, Response: &retrysafe.Response{Status: 200}}); err != nil {
		t.Fatalf("Complete after the killed batch: %v", err)
	}
	for _, k := range []string{"fresh", "plug"} {
		if res := mustClaim(t, s, claimP(k, fpA, at(0))); !res.Claimed {
			t.Errorf("claim of %s after the killed batch lost", k)
		}
	}
}

// TestBatchDoesNotWaitForHeldRow: a row held by another transaction (an
// uncommitted CompleteTx) does not hold up the batch: the extension of that
// row runs alone and waits, while the claims batched with it are answered.
func TestBatchDoesNotWaitForHeldRow(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	s := newBatchStore(t, newDB(t, 4), table)
	ctx := t.Context()
	p := claimP("held", fpA, at(0))
	mustClaim(t, s, p)
	tx, err := sharedDB(t).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := s.CompleteTx(ctx, tx, &retrysafe.CompleteParams{Scope: scope, Key: "held", Token: p.Token, Now: at(0), TTL: ttl, Response: &retrysafe.Response{Status: 200}}); err != nil {
		t.Fatal(err)
	}

	release := holdKeys(t, table, "plug")
	plugErr, _ := plug(t, s, table)
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
	before := s.BatchStats()
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
	if st := s.BatchStats(); st.Alone-before.Alone != 1 {
		t.Errorf("%d operations ran alone, want 1 (the extension of the held row)", st.Alone-before.Alone)
	}
	select {
	case err := <-extendErr:
		t.Fatalf("Extend of the held row returned %v while the row is held", err)
	default:
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-extendErr; !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("Extend after the CompleteTx committed: %v, want ErrLeaseLost", err)
	}
}

// TestBatchAbandoned: when every caller of a running batch gives up, the
// batch is abandoned: the caller returns its context's error while the
// batch's statement is still blocked. As with any statement cut by its
// context, whether the claim took effect is unknown; the store goes on
// working.
func TestBatchAbandoned(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	s := newBatchStore(t, newDB(t, 4), table)
	release := holdKeys(t, table, "k")
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Claim(ctx, claimP("k", fpA, at(0)))
		errc <- err
	}()
	waitForLockWait(t, table)
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
	p := claimP("k", fpA, at(0))
	mustClaim(t, s, p)
	s.Close()
	if _, err := s.Claim(t.Context(), claimP("other", fpA, at(0))); !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Fatalf("Claim after Close: %v, want ErrStoreUnavailable", err)
	}
	if err := s.Complete(t.Context(), &retrysafe.CompleteParams{Scope: scope, Key: "k", Token: p.Token, Now: at(0), TTL: ttl}); !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Fatalf("Complete after Close: %v, want ErrStoreUnavailable", err)
	}
}

// TestBatchesInFlight: with the default BatchesInFlight (2), an operation
// sent while a batch is held in MySQL runs in a second batch at once.
func TestBatchesInFlight(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	s := newStoreOn(t, newDB(t, 4), table)
	release := holdKeys(t, table, "plug")
	plugErr, _ := plug(t, s, table)
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

// TestReplayIsOneRead: a claim that a record blocks (a replay, a request
// in flight, a mismatch) is answered from the plain read and never
// reaches a batch.
func TestReplayIsOneRead(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	mustComplete(t, s, "done", "created")
	live := mustClaim(t, s, claimP("live", fpA, at(0)))
	before := s.BatchStats()
	if r := mustClaim(t, s, claimP("done", fpA, at(time.Second))); r.Claimed || r.Record.State != retrysafe.StateCompleted ||
		string(r.Record.Response.Body) != "created" {
		t.Errorf("replay: claimed=%v %+v", r.Claimed, r.Record)
	}
	if r := mustClaim(t, s, claimP("live", fpB, at(time.Second))); r.Claimed || r.Record.Token != live.Record.Token {
		t.Errorf("claim of a live lease: claimed=%v %+v", r.Claimed, r.Record)
	}
	if r := mustClaim(t, s, claimP("done", fpB, at(time.Second))); r.Claimed || r.Record.Fingerprint != fpA {
		t.Errorf("mismatch: claimed=%v %+v", r.Claimed, r.Record)
	}
	if after := s.BatchStats(); after != before {
		t.Errorf("blocked claims reached a batch: %+v, then %+v", before, after)
	}
}

// TestBatchEveryOutcome: one batch holding every kind of claim that gets
// past the plain read and every fenced operation, won and lost, with an
// abandon and a checkpoint. Each caller gets the answer its single
// statement would give; the claims of keys that have a record (a
// takeover, a replaced expired record, a record committed after the plain
// read), which the batch leaves to the claim procedure, are counted as run
// alone.
func TestBatchEveryOutcome(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	db := sharedDB(t)
	s := newBatchStore(t, newDB(t, 4), table)
	ctx := t.Context()
	resp := &retrysafe.Response{Status: 201, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("created")}
	complete := func(key, token string, now time.Time) error {
		return s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: key, Token: token, Now: now, TTL: ttl, Response: resp})
	}
	now := at(lease + time.Second) // the batch's time
	// Before the batch:
	stale := mustClaim(t, s, claimP("stale", fpA, at(0)))            // lease run out at now: takeover
	old := mustClaim(t, s, claimP("old", fpA, at(-ttl-time.Minute))) // completed, expired at now
	mine := mustClaim(t, s, claimP("mine", fpA, at(lease)))          // completed in the batch
	rel := mustClaim(t, s, claimP("rel", fpA, at(lease)))            // released in the batch
	ext := mustClaim(t, s, claimP("ext", fpA, at(lease)))            // extended in the batch
	cp := mustClaim(t, s, claimP("cp", fpA, at(lease)))              // checkpointed in the batch
	ab := mustClaim(t, s, claimP("ab", fpA, at(lease)))              // abandoned in the batch
	foreign := mustClaim(t, s, claimP("foreign", fpA, at(lease)))    // completed in the batch by a non-owner
	if err := complete("old", old.Record.Token, at(-ttl-time.Minute)); err != nil {
		t.Fatal(err)
	}

	release := holdKeys(t, table, "plug")
	plugErr, _ := plug(t, s, table)
	before := s.BatchStats()
	claims := map[string]*retrysafe.ClaimParams{
		"new": claimP("new", fpA, now), "stale": claimP("stale", fpA, now), "old": claimP("old", fpB, now),
		"raced": claimP("raced", fpA, now),
	}
	order := []string{"new", "stale", "old", "raced"}
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
	checkpoint := &retrysafe.Checkpoint{Name: "charged", Data: []byte("ch_1\x00\xff")}
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
		{"checkpoint cp", func() error {
			return s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope, Key: "cp", Token: cp.Record.Token, Now: now, Lease: lease, Checkpoint: checkpoint})
		}, nil},
		{"abandon ab", func() error {
			return s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope, Key: "ab", Token: ab.Record.Token, Now: now, Abandon: true})
		}, nil},
		{"complete absent", func() error { return complete("absent-c", "tok", now) }, retrysafe.ErrLeaseLost},
		{"complete foreign", func() error { return complete("foreign", mine.Record.Token, now) }, retrysafe.ErrLeaseLost},
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
	// "raced" was absent at its claim's plain read; another process's
	// record commits before the batch runs.
	if _, err := db.ExecContext(ctx, "INSERT INTO `"+table+"` (scope, idem_key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns)"+
		" VALUES (?, 'raced', ?, 'processing', 'racer', 1, ?, ?, ?)", scope, fpA, now.UnixNano(), now.UnixNano(), now.Add(lease).UnixNano()); err != nil {
		t.Fatal(err)
	}
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
	batchtest.Alone(t, before, after, 3, "the takeover of stale, the replacement of old, the raced claim")

	if r := got["new"]; !r.Claimed || r.Record.Attempt != 1 || r.Record.Token != claims["new"].Token || !r.Record.CreatedAt.Equal(now) ||
		!r.Record.LeaseUntil.Equal(now.Add(lease)) || r.Record.Checkpoint != nil {
		t.Errorf("new key: claimed=%v %+v", r.Claimed, r.Record)
	}
	if r := got["stale"]; !r.Claimed || r.Record.Attempt != 2 || r.Record.Token != claims["stale"].Token ||
		!r.Record.CreatedAt.Equal(stale.Record.CreatedAt) {
		t.Errorf("takeover: claimed=%v %+v, want attempt 2 keeping CreatedAt", r.Claimed, r.Record)
	}
	if r := got["old"]; !r.Claimed || r.Record.Attempt != 1 || r.Record.Fingerprint != fpB || !r.Record.CreatedAt.Equal(now) ||
		r.Record.Response != nil {
		t.Errorf("expired record replaced: claimed=%v %+v, want a fresh record", r.Claimed, r.Record)
	}
	if r := got["raced"]; r.Claimed || r.Record.Token != "racer" {
		t.Errorf("claim of a key recorded after its plain read: claimed=%v %+v, want the racer's record", r.Claimed, r.Record)
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
	if r := get("new"); r == nil || r.State != retrysafe.StateProcessing || r.Token != claims["new"].Token || r.Attempt != 1 {
		t.Errorf("new after the batch: %+v", r)
	}
	if r := get("mine"); r == nil || r.State != retrysafe.StateCompleted || r.Response == nil || r.Response.Status != 201 ||
		string(r.Response.Body) != "created" || r.Response.Header.Get("Content-Type") != "text/plain" || !r.ExpiresAt.Equal(now.Add(ttl)) {
		t.Errorf("mine after its completion: %+v", r)
	}
	if r := get("rel"); r != nil {
		t.Errorf("rel after its release: %+v, want no record", r)
	}
	if r := get("ext"); r == nil || !r.LeaseUntil.Equal(now.Add(lease)) || !r.UpdatedAt.Equal(now) || r.Checkpoint != nil || r.Abandoned {
		t.Errorf("ext after its extension: %+v, want the lease until %v", r, now.Add(lease))
	}
	if r := get("cp"); r == nil || !r.LeaseUntil.Equal(now.Add(lease)) || r.Checkpoint == nil || r.Checkpoint.Name != "charged" ||
		string(r.Checkpoint.Data) != string(checkpoint.Data) || !r.Checkpoint.At.Equal(now) {
		t.Errorf("cp after its checkpoint: %+v", r)
	}
	if r := get("ab"); r == nil || !r.Abandoned || !r.LeaseUntil.Equal(ab.Record.LeaseUntil) || !r.UpdatedAt.Equal(now) {
		t.Errorf("ab after its abandon: %+v, want abandoned with its lease unchanged", r)
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

// TestLoneClaimIsOneInsert: a lone claim of a key that the plain read
// found absent is one INSERT, without the claim procedure: with the
// procedure dropped, it still claims the key (and a claim that the
// procedure decides fails).
func TestLoneClaimIsOneInsert(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	s := newStoreOn(t, sharedDB(t), table)
	ctx := t.Context()
	if _, err := sharedDB(t).ExecContext(ctx, "DROP PROCEDURE `"+table+"_claim`"); err != nil {
		t.Fatal(err)
	}
	p := claimP("new", fpA, at(0))
	p.Route = "POST /payments"
	res := mustClaim(t, s, p)
	if !res.Claimed || res.Record.Token != p.Token || res.Record.Attempt != 1 || !res.Record.LeaseUntil.Equal(at(lease)) {
		t.Fatalf("lone claim of an absent key: %+v", res)
	}
	rec := getRec(t, s, "new", at(0))
	if rec == nil || rec.State != retrysafe.StateProcessing || rec.Token != p.Token || rec.Fingerprint != fpA ||
		rec.Route != "POST /payments" || !rec.CreatedAt.Equal(at(0)) || !rec.LeaseUntil.Equal(at(lease)) || rec.Abandoned || rec.Checkpoint != nil {
		t.Fatalf("record of the lone claim: %+v", rec)
	}
	// A takeover is the procedure's: it fails without it.
	if _, err := s.Claim(ctx, claimP("new", fpA, at(lease+time.Second))); err == nil {
		t.Fatal("takeover without the claim procedure succeeded: the test does not see which path a claim takes")
	}
}

// TestLoneClaimMeetsARecord: a lone claim whose key has a record by the
// time its INSERT runs (the plain read found none) gets the claim
// procedure's answer: the stored record of a live one, a takeover of an
// expired lease.
func TestLoneClaimMeetsARecord(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	mustComplete(t, s, "done", "created")
	stale := mustClaim(t, s, claimP("stale", fpA, at(0)))

	res, err := s.ClaimAsAbsent(ctx, claimP("done", fpA, at(time.Second)))
	if err != nil || res.Claimed || res.Record.State != retrysafe.StateCompleted || string(res.Record.Response.Body) != "created" {
		t.Fatalf("lone claim of a completed key: %+v, %v; want its record", res, err)
	}
	p := claimP("stale", fpA, at(lease+time.Second))
	res, err = s.ClaimAsAbsent(ctx, p)
	if err != nil || !res.Claimed || res.Record.Attempt != 2 || res.Record.Token != p.Token {
		t.Fatalf("lone claim of an expired lease: %+v, %v; want a takeover", res, err)
	}
	if rec := getRec(t, s, "stale", p.Now); rec == nil || rec.Token != p.Token || rec.Token == stale.Record.Token || rec.Attempt != 2 {
		t.Fatalf("record after the takeover: %+v", rec)
	}
}

// TestSharedReads: concurrent claims of completed keys, each key wanted
// by two callers at once, each get the record of their own key, and some
// of their plain reads went out together (a read batch held several).
// Without the shared read every claim's read is a batch of its own.
func TestSharedReads(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	const keys = 12
	for k := range keys {
		mustComplete(t, s, fmt.Sprint("k", k), fmt.Sprint("body-", k))
	}
	for round := 0; ; round++ {
		var wg sync.WaitGroup
		for c := range 2 * keys {
			key := fmt.Sprint("k", c%keys)
			wg.Go(func() {
				r, err := s.Claim(t.Context(), claimP(key, fpA, at(time.Second)))
				switch {
				case err != nil:
					t.Errorf("claim of %s: %v", key, err)
				case r.Claimed || r.Record.Key != key || r.Record.Response == nil || string(r.Record.Response.Body) != "body-"+key[1:]:
					t.Errorf("claim of %s: claimed=%v, record %+v", key, r.Claimed, r.Record)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		if batches, items := s.ReadStats(); batches < items {
			return // some reads went together
		} else if round == 20 {
			t.Fatalf("%d reads in %d SELECTs after %d rounds of %d concurrent claims: no read was shared", items, batches, round+1, 2*keys)
		}
	}
}

// TestBatchCompletionOutcomes: in one batch of completions (and a
// claim), only some of which can take effect, each caller gets what its
// single statement would give: the owners' completions (one of an
// abandoned record) take effect, and a completion by a token that no
// longer owns the record (taken over), by a non-owner, of an absent key,
// or of a record its owner completed already is lost. None runs alone.
func TestBatchCompletionOutcomes(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	s := newBatchStore(t, newDB(t, 4), table)
	ctx := t.Context()
	now := at(lease + time.Second) // the batch's time
	resp := &retrysafe.Response{Status: 201, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("created")}
	complete := func(key, token string) error {
		return s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: key, Token: token, Now: now, TTL: ttl, Response: resp})
	}
	mine := mustClaim(t, s, claimP("mine", fpA, at(lease)))
	ab := mustClaim(t, s, claimP("ab", fpA, at(lease)))
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope, Key: "ab", Token: ab.Record.Token, Now: at(lease), Abandon: true}); err != nil {
		t.Fatal(err)
	}
	taken := mustClaim(t, s, claimP("taken", fpA, at(0)))
	taker := mustClaim(t, s, claimP("taken", fpA, now)) // the lease ran out: a takeover
	if !taker.Claimed {
		t.Fatal("takeover lost")
	}
	foreign := mustClaim(t, s, claimP("foreign", fpA, at(lease)))
	twice := mustClaim(t, s, claimP("twice", fpA, at(lease)))
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "twice", Token: twice.Record.Token, Now: at(lease), TTL: ttl,
		Response: &retrysafe.Response{Status: 200}}); err != nil {
		t.Fatal(err)
	}

	release := holdKeys(t, table, "plug")
	plugErr, _ := plug(t, s, table)
	before := s.BatchStats()
	ops := []struct {
		name string
		call func() error
		want error
	}{
		{"claim new", func() error {
			res, err := s.Claim(ctx, claimP("new", fpA, now))
			if err == nil && !res.Claimed {
				err = errors.New("not claimed")
			}
			return err
		}, nil},
		{"complete mine", func() error { return complete("mine", mine.Record.Token) }, nil},
		{"complete ab", func() error { return complete("ab", ab.Record.Token) }, nil},
		{"complete taken", func() error { return complete("taken", taken.Record.Token) }, retrysafe.ErrLeaseLost},
		{"complete foreign", func() error { return complete("foreign", mine.Record.Token) }, retrysafe.ErrLeaseLost},
		{"complete absent", func() error { return complete("absent", "tok") }, retrysafe.ErrLeaseLost},
		// Completed already, by its owner: the row has the token.
		{"complete twice", func() error { return complete("twice", twice.Record.Token) }, retrysafe.ErrLeaseLost},
	}
	var calls []func() error
	for _, op := range ops {
		calls = append(calls, op.call)
	}
	wait := batchtest.SendInOrder(t, s, calls)
	release()
	if err := <-plugErr; err != nil {
		t.Fatalf("plug: %v", err)
	}
	for i, err := range wait() {
		if op := ops[i]; !errors.Is(err, op.want) || (op.want == nil && err != nil) {
			t.Errorf("%s: %v, want %v", op.name, err, op.want)
		}
	}
	after := s.BatchStats()
	batchtest.OneBatch(t, before, after, len(calls))
	batchtest.Alone(t, before, after, 0, "none")
	for _, k := range []string{"mine", "ab"} {
		if r := getRec(t, s, k, now); r == nil || r.State != retrysafe.StateCompleted || r.Abandoned || r.Response == nil ||
			r.Response.Status != 201 || string(r.Response.Body) != "created" || !r.UpdatedAt.Equal(now) || !r.ExpiresAt.Equal(now.Add(ttl)) {
			t.Errorf("%s after its completion: %+v", k, r)
		}
	}
	if r := getRec(t, s, "new", now); r == nil || r.State != retrysafe.StateProcessing {
		t.Errorf("new after its claim: %+v", r)
	}
	if r := getRec(t, s, "taken", now); r == nil || r.State != retrysafe.StateProcessing || r.Token != taker.Record.Token {
		t.Errorf("taken after the old owner's completion: %+v, want the new owner's processing record", r)
	}
	if r := getRec(t, s, "foreign", now); r == nil || r.State != retrysafe.StateProcessing || r.Token != foreign.Record.Token {
		t.Errorf("foreign after a non-owner's completion: %+v, want its owner's processing record", r)
	}
	if r := getRec(t, s, "absent", now); r != nil {
		t.Errorf("absent: a lost completion left a record: %+v", r)
	}
	if r := getRec(t, s, "twice", now); r == nil || r.Response == nil || r.Response.Status != 200 || !r.UpdatedAt.Equal(at(lease)) {
		t.Errorf("twice after a second completion: %+v, want the first completion", r)
	}
}
