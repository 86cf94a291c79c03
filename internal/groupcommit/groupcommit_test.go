package groupcommit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/internal/groupcommit"
)

// fakeDB is the fake transaction the tests commit into: a map of counters.
// An item "key" adds one to key and answers key's new value; the key "bad"
// fails on its own. A batch applies its items to a copy and commits the
// copy, unless the test makes the commit fail.
type fakeDB struct {
	mu      sync.Mutex
	data    map[string]int
	batches [][]string // the inputs of each batch run, in order

	// gate, if set, is received from at the start of each batch, after
	// entered is sent (hold a batch in flight).
	gate    chan struct{}
	entered chan struct{}
	// failCommit makes a batch that holds this key fail as a whole.
	failCommit string
}

var errBad = errors.New("bad item")

func newFakeDB() *fakeDB { return &fakeDB{data: map[string]int{}} }

// run is the batch function: one transaction for the batch.
func (db *fakeDB) run(b *groupcommit.Batch[string, int]) error {
	if db.gate != nil {
		db.entered <- struct{}{}
		<-db.gate
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	tx := maps(db.data)
	var inputs []string
	failCommit := false
	for i := range b.Len() {
		if !b.Start(i) {
			continue
		}
		key := b.Input(i)
		inputs = append(inputs, key)
		if key == "bad" {
			b.Set(i, 0, errBad)
			continue
		}
		if key == db.failCommit {
			failCommit = true
		}
		tx[key]++
		b.Set(i, tx[key], nil)
	}
	db.batches = append(db.batches, inputs)
	if failCommit {
		return errors.New("commit failed")
	}
	db.data = tx
	return nil
}

func maps(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func (db *fakeDB) snapshot() (map[string]int, [][]string) {
	db.mu.Lock()
	defer db.mu.Unlock()
	return maps(db.data), slices.Clone(db.batches)
}

// plugged returns a committer on db whose first batch (an item "plug") is
// held in flight until the returned release is called; every item sent
// meanwhile queues for the next batch.
func plugged(t *testing.T, db *fakeDB, cfg groupcommit.Config) (c *groupcommit.Committer[string, int], release func(), plugErr <-chan error) {
	t.Helper()
	db.gate = make(chan struct{})
	db.entered = make(chan struct{}, 1)
	c = groupcommit.New(cfg, db.run)
	t.Cleanup(c.Close)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Do(context.Background(), "plug")
		errc <- err
	}()
	<-db.entered
	var once sync.Once
	release = func() { once.Do(func() { close(db.gate) }) }
	t.Cleanup(release)
	// Later batches must not block on the gate: drain entered from now on.
	go func() {
		for range db.entered {
		}
	}()
	return c, release, errc
}

// waitQueued waits until n items are queued (a synchronisation; the bound
// only turns a bug into a failure instead of a hang).
func waitQueued(t *testing.T, c *groupcommit.Committer[string, int], n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for c.Queued() != n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d queued items (have %d)", n, c.Queued())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

type result struct {
	v   int
	err error
}

// send runs Do(key) on its own goroutine and returns the channel of its
// result.
func send(ctx context.Context, c *groupcommit.Committer[string, int], key string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		v, err := c.Do(ctx, key)
		ch <- result{v, err}
	}()
	return ch
}

func TestLoneItemRunsAtOnce(t *testing.T) {
	t.Parallel()
	db := newFakeDB()
	// An hour of linger: a lone item that waited for a timer would hang.
	c := groupcommit.New(groupcommit.Config{Linger: time.Hour}, db.run)
	defer c.Close()
	for i := range 3 {
		v, err := c.Do(context.Background(), "k")
		if err != nil || v != i+1 {
			t.Fatalf("Do #%d = %d, %v; want %d", i, v, err, i+1)
		}
	}
	_, batches := db.snapshot()
	if len(batches) != 3 {
		t.Fatalf("batches %v, want three batches of one", batches)
	}
	if st := c.Stats(); st.Batches != 3 || st.Items != 3 || st.Single != 3 {
		t.Fatalf("Stats = %+v, want 3 batches of 1 item", st)
	}
}

// TestOrderAndMaxBatch: items queued behind a running batch go into the
// next batches in submission order, at most MaxBatch at a time, and each
// caller gets its own item's result.
func TestOrderAndMaxBatch(t *testing.T) {
	t.Parallel()
	db := newFakeDB()
	c, release, plugErr := plugged(t, db, groupcommit.Config{MaxBatch: 4})
	var keys []string
	var results []<-chan result
	for i := range 10 {
		key := fmt.Sprintf("k%d", i%3) // repeated keys: order shows in the values
		keys = append(keys, key)
		results = append(results, send(context.Background(), c, key))
		waitQueued(t, c, i+1)
	}
	release()
	if err := <-plugErr; err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i, ch := range results {
		r := <-ch
		seen[keys[i]]++
		if r.err != nil || r.v != seen[keys[i]] {
			t.Errorf("item %d (%s) = %d, %v; want %d", i, keys[i], r.v, r.err, seen[keys[i]])
		}
	}
	_, batches := db.snapshot()
	want := [][]string{{"plug"}, keys[0:4], keys[4:8], keys[8:10]}
	if fmt.Sprint(batches) != fmt.Sprint(want) {
		t.Fatalf("batches %v, want %v", batches, want)
	}
}

// TestConcurrentCallers: 200 goroutines released at once, several rounds;
// every caller gets exactly its own result and batches form.
func TestConcurrentCallers(t *testing.T) {
	t.Parallel()
	for _, cfg := range []groupcommit.Config{{MaxBatch: 16}, {MaxBatch: 16, MaxInFlight: 3, Gather: true}} {
		t.Run(fmt.Sprintf("inflight=%d,gather=%v", cfg.MaxInFlight, cfg.Gather), func(t *testing.T) {
			t.Parallel()
			testConcurrentCallers(t, cfg)
		})
	}
}

func testConcurrentCallers(t *testing.T, cfg groupcommit.Config) {
	db := newFakeDB()
	c := groupcommit.New(cfg, db.run)
	defer c.Close()
	const goroutines, rounds = 200, 5
	for round := range rounds {
		start := make(chan struct{})
		var ready, done sync.WaitGroup
		errs := make([]error, goroutines)
		for g := range goroutines {
			ready.Add(1)
			done.Go(func() {
				ready.Done()
				<-start
				key := fmt.Sprintf("r%d-g%d", round, g)
				v, err := c.Do(context.Background(), key)
				if err != nil || v != 1 {
					errs[g] = fmt.Errorf("Do(%s) = %d, %v; want 1", key, v, err)
				}
				// A shared key too: its values are handed out exactly once each.
				if _, err := c.Do(context.Background(), "shared"); err != nil {
					errs[g] = err
				}
			})
		}
		ready.Wait()
		close(start)
		done.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	data, batches := db.snapshot()
	if data["shared"] != goroutines*rounds {
		t.Errorf("shared = %d, want %d", data["shared"], goroutines*rounds)
	}
	items := 0
	for _, b := range batches {
		if len(b) > 16 {
			t.Errorf("batch of %d items, over MaxBatch 16", len(b))
		}
		items += len(b)
	}
	st := c.Stats()
	if items != 2*goroutines*rounds || st.Items != int64(items) || st.Batches != int64(len(batches)) {
		t.Fatalf("%d items in %d batches, Stats %+v; want %d items", items, len(batches), st, 2*goroutines*rounds)
	}
	t.Logf("%d items in %d batches (%.1f per batch)", items, len(batches), float64(items)/float64(len(batches)))
}

// TestBatchesFormBehindARunningBatch: items sent while a batch runs all go
// into the next one.
func TestBatchesFormBehindARunningBatch(t *testing.T) {
	t.Parallel()
	db := newFakeDB()
	c, release, plugErr := plugged(t, db, groupcommit.Config{})
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if v, err := c.Do(context.Background(), fmt.Sprint("k", i)); err != nil || v != 1 {
				errs <- fmt.Errorf("k%d: %d, %v", i, v, err)
			}
		})
	}
	waitQueued(t, c, n)
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := <-plugErr; err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Batches != 2 || st.Items != n+1 || st.Single != 1 {
		t.Fatalf("Stats %+v, want the plug (a batch of one), then %d items in one batch", st, n)
	}
}

// TestFailingItem: an item whose own work fails gets its error; the other
// items of its batch commit.
func TestFailingItem(t *testing.T) {
	t.Parallel()
	db := newFakeDB()
	c, release, _ := plugged(t, db, groupcommit.Config{})
	keys := []string{"a", "bad", "b"}
	var results []<-chan result
	for i, k := range keys {
		results = append(results, send(context.Background(), c, k))
		waitQueued(t, c, i+1)
	}
	release()
	for i, ch := range results {
		r := <-ch
		if keys[i] == "bad" {
			if !errors.Is(r.err, errBad) {
				t.Errorf("bad item: %d, %v; want errBad", r.v, r.err)
			}
		} else if r.err != nil || r.v != 1 {
			t.Errorf("%s beside the bad item: %d, %v; want 1", keys[i], r.v, r.err)
		}
	}
	if data, _ := db.snapshot(); data["a"] != 1 || data["b"] != 1 {
		t.Errorf("data %v: a and b not committed", data)
	}
}

// TestFailedCommit: when the batch fails as a whole, every item of it gets
// the error and none took effect; the next batch works.
func TestFailedCommit(t *testing.T) {
	t.Parallel()
	db := newFakeDB()
	db.failCommit = "doomed"
	c, release, _ := plugged(t, db, groupcommit.Config{})
	keys := []string{"a", "doomed", "b"}
	var results []<-chan result
	for i, k := range keys {
		results = append(results, send(context.Background(), c, k))
		waitQueued(t, c, i+1)
	}
	release()
	for i, ch := range results {
		if r := <-ch; r.err == nil || !strings.Contains(r.err.Error(), "commit failed") {
			t.Errorf("%s in the failed batch: %d, %v; want the commit's error", keys[i], r.v, r.err)
		}
	}
	if data, _ := db.snapshot(); data["a"] != 0 || data["b"] != 0 {
		t.Errorf("data %v after the failed commit, want no a, no b", data)
	}
	if v, err := c.Do(context.Background(), "a"); err != nil || v != 1 {
		t.Fatalf("Do after the failed batch = %d, %v; want 1", v, err)
	}
}

// TestCancelWhileQueued: a caller whose context ends while its item is
// queued gets the context's error at once (the running batch still
// holds), and its item is never run.
func TestCancelWhileQueued(t *testing.T) {
	t.Parallel()
	db := newFakeDB()
	c, release, _ := plugged(t, db, groupcommit.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := send(ctx, c, "cancelled")
	waitQueued(t, c, 1)
	kept := send(context.Background(), c, "kept")
	waitQueued(t, c, 2)
	cancel()
	if r := <-cancelled; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled queued item: %d, %v; want context.Canceled", r.v, r.err)
	}
	if n := c.Queued(); n != 1 {
		t.Errorf("%d items queued after the cancellation, want 1", n)
	}
	release()
	if r := <-kept; r.err != nil || r.v != 1 {
		t.Fatalf("kept: %d, %v", r.v, r.err)
	}
	if _, batches := db.snapshot(); fmt.Sprint(batches) != "[[plug] [kept]]" {
		t.Fatalf("batches %v, want the cancelled item never run", batches)
	}
}

// TestCancelBeforeStart: an item taken into a batch whose function has
// not started it yet may still be given up: Do returns the context's
// error and Start reports false.
func TestCancelBeforeStart(t *testing.T) {
	t.Parallel()
	taken := make(chan struct{})
	proceed := make(chan struct{})
	var started []bool
	c := groupcommit.New(groupcommit.Config{}, func(b *groupcommit.Batch[string, int]) error {
		close(taken)
		<-proceed
		for i := range b.Len() {
			ok := b.Start(i)
			started = append(started, ok)
			if ok {
				b.Set(i, 7, nil)
			}
		}
		return nil
	})
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ch := send(ctx, c, "x")
	<-taken
	cancel()
	if r := <-ch; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("item given up before its start: %d, %v; want context.Canceled", r.v, r.err)
	}
	close(proceed)
	c.Close() // waits for the batch
	if fmt.Sprint(started) != "[false]" {
		t.Fatalf("Start results %v, want [false]", started)
	}
	if st := c.Stats(); st.Batches != 0 || st.Items != 0 {
		t.Fatalf("Stats %+v, want nothing run", st)
	}
}

// TestCancelWhileStarted: once its item has started, a caller whose
// context ends waits for the batch and gets the item's real outcome; the
// batch's context ends only once every caller has given up.
func TestCancelWhileStarted(t *testing.T) {
	t.Parallel()
	inBatch := make(chan context.Context, 1)
	proceed := make(chan struct{})
	c := groupcommit.New(groupcommit.Config{}, func(b *groupcommit.Batch[string, int]) error {
		for i := range b.Len() {
			if b.Start(i) {
				b.Set(i, 42, nil)
			}
		}
		inBatch <- b.Context()
		<-proceed
		return nil
	})
	defer c.Close()
	ctx1, cancel1 := context.WithCancel(context.Background())
	first := send(ctx1, c, "first")
	bctx := <-inBatch // the batch of "first" alone is running
	ctx2, cancel2 := context.WithCancel(context.Background())
	second := send(ctx2, c, "second")
	waitQueued(t, c, 1)
	cancel2() // queued: answered at once
	if r := <-second; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("queued item: %v, want context.Canceled", r.err)
	}
	cancel1()
	<-bctx.Done() // the only caller of the running batch gave up
	select {
	case r := <-first:
		t.Fatalf("started item answered %v before its batch ended", r)
	default:
	}
	close(proceed)
	if r := <-first; r.err != nil || r.v != 42 {
		t.Fatalf("started item whose caller gave up: %d, %v; want its outcome 42", r.v, r.err)
	}
}

// TestBatchContextWaitsForEveryCaller: the batch's context stays live
// while one of its callers still waits, and ends when all have given up.
func TestBatchContextWaitsForEveryCaller(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	entered := make(chan struct{}, 2)
	ctxs := make(chan context.Context, 1)
	c := groupcommit.New(groupcommit.Config{}, func(b *groupcommit.Batch[string, int]) error {
		entered <- struct{}{}
		<-gate
		for i := range b.Len() {
			if b.Start(i) {
				b.Set(i, 1, nil)
			}
		}
		if b.Len() > 1 {
			ctxs <- b.Context()
			<-b.Context().Done()
			return b.Context().Err()
		}
		return nil
	})
	defer c.Close()
	plug := send(context.Background(), c, "plug")
	<-entered
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	a := send(ctxA, c, "a")
	waitQueued(t, c, 1)
	b := send(ctxB, c, "b")
	waitQueued(t, c, 2)
	close(gate)
	if r := <-plug; r.err != nil {
		t.Fatal(r.err)
	}
	bctx := <-ctxs // a and b are started
	cancelA()
	// Give a's cancellation time to reach the batch (a wrong committer
	// would end the batch's context now; a right one never does).
	time.Sleep(20 * time.Millisecond)
	if bctx.Err() != nil {
		t.Fatal("the batch's context ended while caller b still waits")
	}
	cancelB()
	<-bctx.Done()
	for name, ch := range map[string]<-chan result{"a": a, "b": b} {
		if r := <-ch; !errors.Is(r.err, context.Canceled) {
			t.Errorf("%s: %v, want the batch's error (context.Canceled)", name, r.err)
		}
	}
}

// TestAnswerEarly: an item answered with Batch.Answer keeps that answer
// whatever the batch function returns afterwards.
func TestAnswerEarly(t *testing.T) {
	t.Parallel()
	c := groupcommit.New(groupcommit.Config{}, func(b *groupcommit.Batch[string, int]) error {
		if !b.Start(0) {
			return nil
		}
		b.Answer(0, 5, errBad)
		if b.Start(0) {
			return errors.New("Start reported true for an answered item")
		}
		return errors.New("batch failed after the answer")
	})
	defer c.Close()
	if v, err := c.Do(context.Background(), "x"); v != 5 || !errors.Is(err, errBad) {
		t.Fatalf("Do = %d, %v; want the early answer 5, errBad", v, err)
	}
}

// TestClose: Close fails the queued items with ErrClosed, waits for the
// running batch (whose items get their outcomes), and later calls fail.
func TestClose(t *testing.T) {
	t.Parallel()
	db := newFakeDB()
	c, release, plugErr := plugged(t, db, groupcommit.Config{Linger: time.Hour})
	queued := []<-chan result{send(context.Background(), c, "q1")}
	waitQueued(t, c, 1)
	queued = append(queued, send(context.Background(), c, "q2"))
	waitQueued(t, c, 2)
	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	for _, ch := range queued {
		if r := <-ch; !errors.Is(r.err, groupcommit.ErrClosed) {
			t.Fatalf("queued item at Close: %v, want ErrClosed", r.err)
		}
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a batch was running")
	default:
	}
	release()
	<-closed
	if err := <-plugErr; err != nil {
		t.Fatalf("item of the batch running at Close: %v, want its outcome", err)
	}
	if _, err := c.Do(context.Background(), "late"); !errors.Is(err, groupcommit.ErrClosed) {
		t.Fatalf("Do after Close: %v, want ErrClosed", err)
	}
	if data, batches := db.snapshot(); data["q1"] != 0 || len(batches) != 1 {
		t.Fatalf("data %v, batches %v: want only the plug run", data, batches)
	}
	c.Close() // again: no-op
}

// TestCloseIdleLingeringLeader: Close ends a lingering leader at once and
// calls Exit.
func TestCloseIdleLingeringLeader(t *testing.T) {
	t.Parallel()
	var exits atomic.Int32
	db := newFakeDB()
	c := groupcommit.New(groupcommit.Config{Linger: time.Hour, Exit: func() { exits.Add(1) }}, db.run)
	if _, err := c.Do(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	c.Close() // would hang for the linger hour if it did not wake the leader
	if n := exits.Load(); n != 1 {
		t.Fatalf("Exit called %d times, want 1", n)
	}
}

// TestLeaderRestarts: with no linger the leader exits whenever the queue
// empties; items from a few goroutines keep starting new leaders, Idle
// and Exit hooks never overlap a batch (the race detector checks their
// shared state), and every item is answered.
func TestLeaderRestarts(t *testing.T) {
	t.Parallel()
	var conn int // state owned by the leader: set by batches, reset by Exit
	var leaders, exits atomic.Int32
	c := groupcommit.New(groupcommit.Config{
		Idle: func() { conn++ },
		Exit: func() { conn = 0; exits.Add(1) },
	}, func(b *groupcommit.Batch[string, int]) error {
		if conn == 0 {
			leaders.Add(1)
		}
		conn++
		for i := range b.Len() {
			if b.Start(i) {
				b.Set(i, 1, nil)
			}
		}
		return nil
	})
	defer c.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				if _, err := c.Do(context.Background(), fmt.Sprint(g, i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	c.Close()
	if exits.Load() < 1 || exits.Load() != leaders.Load() {
		t.Fatalf("%d leaders ran batches, %d exited", leaders.Load(), exits.Load())
	}
}

// TestStartAfterContextEnded: Start does not start an item whose caller's
// context has ended, even before the caller noticed.
func TestStartAfterContextEnded(t *testing.T) {
	t.Parallel()
	var started bool
	c := groupcommit.New(groupcommit.Config{}, func(b *groupcommit.Batch[context.CancelFunc, int]) error {
		b.Input(0)() // the caller's context ends inside the batch
		if started = b.Start(0); started {
			b.Set(0, 1, nil)
		}
		return nil
	})
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.Do(ctx, cancel); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want context.Canceled", err)
	}
	c.Close() // the batch function has returned
	if started {
		t.Fatal("Start started an item whose context had ended")
	}
}

// TestMaxInFlight: with MaxInFlight 2 a second batch runs while the first
// is held; with both leaders busy, items queue for one next batch.
func TestMaxInFlight(t *testing.T) {
	t.Parallel()
	for _, gather := range []bool{false, true} {
		t.Run(fmt.Sprintf("gather=%v", gather), func(t *testing.T) {
			t.Parallel()
			testMaxInFlight(t, gather)
		})
	}
}

// testMaxInFlight: with two batches in flight, a second item runs beside a
// held batch at once (with Gather too: its leader yields once and does not
// wait for the running batch), and the items queued while both run form
// one next batch.
func testMaxInFlight(t *testing.T, gather bool) {
	entered := make(chan string, 10)
	gates := map[string]chan struct{}{"first": make(chan struct{}), "second": make(chan struct{})}
	var mu sync.Mutex
	var batches [][]string
	c := groupcommit.New(groupcommit.Config{MaxInFlight: 2, Gather: gather}, func(b *groupcommit.Batch[string, int]) error {
		var in []string
		for i := range b.Len() {
			if b.Start(i) {
				in = append(in, b.Input(i))
				b.Set(i, len(in), nil)
			}
		}
		mu.Lock()
		batches = append(batches, in)
		mu.Unlock()
		entered <- in[0]
		if g, ok := gates[in[0]]; ok {
			<-g
		}
		return nil
	})
	defer c.Close()
	first := send(context.Background(), c, "first")
	if got := <-entered; got != "first" {
		t.Fatalf("entered %q", got)
	}
	second := send(context.Background(), c, "second")
	if got := <-entered; got != "second" { // ran beside the held first batch
		t.Fatalf("entered %q, want the second batch while the first is held", got)
	}
	var rest []<-chan result
	for i := range 5 {
		rest = append(rest, send(context.Background(), c, fmt.Sprint("r", i)))
		waitQueued(t, c, i+1)
	}
	close(gates["first"])
	close(gates["second"])
	for _, ch := range append([]<-chan result{first, second}, rest...) {
		if r := <-ch; r.err != nil {
			t.Fatal(r.err)
		}
	}
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(batches) != "[[first] [second] [r0 r1 r2 r3 r4]]" {
		t.Fatalf("batches %v, want [first], [second] at once, then the five queued ones together", batches)
	}
}

// TestDistinct: Distinct starts a batch's items and keeps the first item
// of each key; the later ones are answered alone at once, and their keys
// are reported.
func TestDistinct(t *testing.T) {
	t.Parallel()
	type got struct {
		first []string
		later []string
	}
	gate, entered := make(chan struct{}), make(chan struct{}, 8)
	var runs []got
	key := func(in string) string { k, _, _ := strings.Cut(in, ":"); return k }
	c := groupcommit.New(groupcommit.Config{}, func(b *groupcommit.Batch[string, int]) error {
		entered <- struct{}{}
		<-gate
		first, later := groupcommit.Distinct(b, key, -1)
		var g got
		for _, i := range first {
			g.first = append(g.first, b.Input(i))
			b.Set(i, i, nil)
		}
		for k, ok := range later {
			if ok {
				g.later = append(g.later, k)
			}
		}
		slices.Sort(g.later)
		runs = append(runs, g)
		return nil
	})
	t.Cleanup(c.Close)
	plug := send(context.Background(), c, "plug")
	<-entered
	inputs := []string{"a:1", "b:1", "a:2", "c:1", "b:2", "a:3"}
	var results []<-chan result
	for n, in := range inputs { // one at a time, so that they queue in this order
		results = append(results, send(context.Background(), c, in))
		waitQueued(t, c, n+1)
	}
	close(gate)
	if r := <-plug; r.err != nil {
		t.Fatal(r.err)
	}
	want := []int{0, 1, -1, 3, -1, -1} // first items answer their index; later ones alone
	for n, ch := range results {
		if r := <-ch; r.err != nil || r.v != want[n] {
			t.Errorf("%s: %d, %v; want %d", inputs[n], r.v, r.err, want[n])
		}
	}
	if len(runs) != 2 || !slices.Equal(runs[1].first, []string{"a:1", "b:1", "c:1"}) || !slices.Equal(runs[1].later, []string{"a", "b"}) {
		t.Fatalf("batches %+v; want the plug, then first a:1 b:1 c:1 with later items of a and b", runs)
	}
}
