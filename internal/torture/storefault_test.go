package torture

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/faultproxy"
	"github.com/retrysafe/retrysafe/internal/storeurl"
)

// Store-level histories with faults. Each run records a concurrent history
// of store calls (RecordStore) against a server of the test's own, through
// a fault proxy (internal/faultproxy) between the store client and the
// server, while an injector cuts every connection, refuses connections for
// a while, adds latency, cuts each connection after a few bytes, and
// crashes and restarts the server. A call that fails is an unknown outcome:
// it may take effect at any point after its start, or never (RecordStore
// gives it no return, porcupine's pending-forever call; sfPrepare bounds it
// by the next crash of the server, and sfModel lets it take effect or not).
// The history must still linearize against the model of the Store
// contract.
//
// SQLite has no such run: it is embedded, so nothing stands between the
// store client and the database to cut, and its only fault is a crash of
// the process itself, which ends the history (no caller survives to see
// an outcome). The gateway-level run kills gateways on SQLite
// (torture_test.go), and store/sqlite's tests reopen a file after a crash.

// Faults the injector makes.
const (
	sfCut      = "cut"       // the proxy resets every open connection
	sfRefuse   = "refuse"    // the proxy refuses connections for 200–600 ms
	sfLatency  = "latency"   // 1–3 s on every chunk, each way, for 2 s (calls give up after 1.5 s)
	sfCutAfter = "cut-after" // every connection is reset after 1–600 more bytes, for 0.3 s
	sfRestart  = "restart"   // the server is crashed and started again on the same data
)

var sfKinds = []string{sfCut, sfRefuse, sfLatency, sfCutAfter, sfRestart}

// errLeaseLostOrReleased is the output runStoreFaults gives, for its second
// check, a Redis Release that answered ErrLeaseLost (sfBackend.retriedRelease).
const errLeaseLostOrReleased = "lease-lost-or-released"

// sfModel is the model of the Store contract (storeStep) for histories
// with faults. It differs from storeModel in two ways. A call with an
// unknown outcome may take effect or not, wherever it is linearized, so
// that a failed call can be given a finite return (sfPrepare) and still
// not have taken effect. (storeModel applies every call it linearizes; a
// failed call there never returns, and not taking effect is linearizing
// it after everything else.) And a Release answered with
// errLeaseLostOrReleased deleted the record if the caller owned it, and
// changed nothing otherwise.
var sfModel = (&porcupine.NondeterministicModel{
	Partition: storeModel.Partition,
	Init:      func() []any { return []any{recordView{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(recordView), input.(storeInput), output.(storeOutput)
		next, want := storeStep(s, in)
		switch {
		case out.Err == errUnknown && next != s:
			return []any{s, next}
		case out.Err == errUnknown:
			return []any{s}
		case out.Err == errLeaseLostOrReleased && in.Op == opRelease && (want.Err == errLeaseLost || want.Err == errNone):
			return []any{next}
		case out == want:
			return []any{next}
		}
		return nil
	},
	DescribeOperation: storeModel.DescribeOperation,
	DescribeState:     storeModel.DescribeState,
}).ToModel()

// sfBackend is a networked store on a server of the test's own.
type sfBackend struct {
	name  string
	start func(t testing.TB) *ownServer
	url   func(addr string) string // the store's URL through the proxy at addr
	// retriedRelease: a Release whose reply was lost, retried by the
	// client, answers ErrLeaseLost although the first attempt deleted the
	// owner's record. store/redis documents it ("Retries of lost
	// replies"): go-redis retries a command whose connection broke, and
	// Release carries no nonce. The run checks the history as recorded
	// first, then with such answers read as "lease lost, or released"
	// (errLeaseLostOrReleased), and reports both verdicts.
	retriedRelease bool
	// absorbs: the client retries a call whose connection broke, on a new
	// connection, so that the faults seldom leave a call with an unknown
	// outcome, and a run need not have one (go-redis's default).
	absorbs bool
}

var sfBackends = []sfBackend{
	// go-redis as configured by default: it retries a command whose
	// connection broke (MaxRetries 3).
	{"redis", ownRedis, func(addr string) string {
		return "redis://" + addr + "/0?dial_timeout=1s&read_timeout=1s&write_timeout=1s"
	}, true, true},
	// Without those retries, every fault the client sees is an unknown
	// outcome.
	{"redis-noretry", ownRedis, func(addr string) string {
		return "redis://" + addr + "/0?dial_timeout=1s&read_timeout=1s&write_timeout=1s&max_retries=-1"
	}, false, false},
	{"postgres", ownPostgres, func(addr string) string {
		return "postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=2"
	}, false, false},
	{"mysql", ownMariaDB, func(addr string) string {
		return "mysql://root@" + addr + "/test?timeout=2s&readTimeout=2s&writeTimeout=2s"
	}, false, false},
}

// sfDuration is how long faults are injected: RETRYSAFE_STOREFAULT_DURATION,
// or 20s (-short: 10s, enough for one round of every fault).
func sfDuration(t testing.TB) time.Duration {
	if v := os.Getenv("RETRYSAFE_STOREFAULT_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("RETRYSAFE_STOREFAULT_DURATION: %v", err)
		}
		return d
	}
	if testing.Short() {
		return 10 * time.Second
	}
	return 20 * time.Second
}

// sfPaced bounds every call with a deadline (a call the fault proxy delays
// or whose connection hangs fails, as an unknown outcome) and waits a
// moment before each, so that a run's calls spread over its faults.
type sfPaced struct {
	retrysafe.Store
	pace, timeout time.Duration
}

func (s sfPaced) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	time.Sleep(s.pace)
	return context.WithTimeout(ctx, s.timeout)
}

// backoff waits after a failed call, as a client would before it retries:
// a server that is down does not turn every worker's next hundred calls
// into unknown outcomes.
func (s sfPaced) backoff(err error) {
	if err != nil && !errors.Is(err, retrysafe.ErrLeaseLost) && !errors.Is(err, retrysafe.ErrNotFound) {
		time.Sleep(300 * time.Millisecond)
	}
}

func (s sfPaced) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	res, err := s.Store.Claim(ctx, p)
	s.backoff(err)
	return res, err
}

func (s sfPaced) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	rec, err := s.Store.Get(ctx, p)
	s.backoff(err)
	return rec, err
}

func (s sfPaced) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	err := s.Store.Extend(ctx, p)
	s.backoff(err)
	return err
}

func (s sfPaced) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	err := s.Store.Complete(ctx, p)
	s.backoff(err)
	return err
}

func (s sfPaced) Release(ctx context.Context, p *retrysafe.ReleaseParams) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	err := s.Store.Release(ctx, p)
	s.backoff(err)
	return err
}

// storeFaultRun is what one run injected, recorded and found.
type storeFaultRun struct {
	Store  string
	Seed   uint64
	Faults map[string]int
	// Operations are the calls checked; Indeterminate the failed ones
	// among them (unknown outcomes); DroppedGets the failed Gets, left
	// out of the check (a read with no answer constrains nothing).
	// BoundByCrash counts the indeterminate calls that a crash of the
	// server ended, DroppedNoOps the failed fenced calls with a token no
	// claim carried, also left out (sfPrepare).
	Operations, Indeterminate, DroppedGets int
	BoundByCrash, DroppedNoOps             int
	Proxy                                  faultproxy.Stats
	Result                                 porcupine.CheckResult
	// AsRecorded is, for a store with retriedRelease, the verdict on the
	// history before ReleasesRead Releases that answered ErrLeaseLost were
	// read as errLeaseLostOrReleased; Result is the verdict after.
	AsRecorded        porcupine.CheckResult
	ReleasesRead      int
	Recorded, Checked time.Duration
	Visualization     string
	Errors            []string // the first few call errors, for the log
	// Listing is, for an illegal history, the calls of one key whose
	// history alone is not linearizable, in the order they started.
	Listing   string
	InjectErr error // a restart that failed
}

func (r *storeFaultRun) String() string {
	var fs []string
	for _, k := range sfKinds {
		fs = append(fs, fmt.Sprintf("%s %d", k, r.Faults[k]))
	}
	verdict := string(r.Result)
	if r.AsRecorded != "" {
		verdict = fmt.Sprintf("%s (as recorded: %s; %d lease-lost Releases read as lease lost or released)", r.Result, r.AsRecorded, r.ReleasesRead)
	}
	return fmt.Sprintf("%s: faults [%s], %d operations checked, %d indeterminate (%d ended by a crash; left out: %d failed gets, %d failed no-ops), %s; recorded in %s, checked in %s (seed %d; proxy %+v)",
		r.Store, strings.Join(fs, ", "), r.Operations, r.Indeterminate, r.BoundByCrash, r.DroppedGets, r.DroppedNoOps, verdict,
		r.Recorded.Round(time.Millisecond), r.Checked.Round(time.Millisecond), r.Seed, r.Proxy)
}

// runStoreFaults records a history against b's store through a fault
// proxy, injecting faults for dur, and checks it. wrap, when not nil,
// wraps the store (a mutant).
func runStoreFaults(t *testing.T, b sfBackend, dur time.Duration, wrap func(retrysafe.Store) retrysafe.Store) *storeFaultRun {
	t.Helper()
	ctx := context.Background()
	srv := b.start(t)
	proxy, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	s, closeStore, err := storeurl.Open(ctx, b.url(proxy.Addr()))
	if err != nil {
		t.Fatalf("%s: %v", b.name, err)
	}
	t.Cleanup(func() { _ = closeStore() })
	var st retrysafe.Store = sfPaced{Store: s, pace: 25 * time.Millisecond, timeout: 1500 * time.Millisecond}
	if wrap != nil {
		st = wrap(st)
	}

	run := &storeFaultRun{Store: b.name, Seed: rand.Uint64(), Faults: map[string]int{}}
	stop := make(chan struct{})
	var (
		h  *StoreHistory
		wg sync.WaitGroup
	)
	start := time.Now()
	wg.Go(func() {
		// Ops only bounds the calls; Stop ends the workload when the
		// faults end (a worker makes about 30 calls a second).
		h = RecordStore(ctx, st, StoreWorkload{Workers: 6, Ops: 100 * int(dur/time.Second+10), Keys: 8, Seed: run.Seed, Stop: stop})
	})
	// The injector: the four link faults once per round in a random
	// order, a healthy 300–800 ms before each, then a restart of the
	// server, until dur has passed; then a healthy second for the calls to
	// see what the faults left. crashes are when each crash began and
	// when the crashed process had exited.
	r := rand.New(rand.NewPCG(run.Seed, 0xfa))
	sleep := func(lo, hi int) { time.Sleep(time.Duration(lo+r.IntN(hi-lo)) * time.Millisecond) }
	var crashes [][2]time.Time
	for time.Since(start) < dur && run.InjectErr == nil {
		kinds := []string{sfCut, sfRefuse, sfLatency, sfCutAfter}
		r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		for _, k := range append(kinds, sfRestart) {
			if time.Since(start) >= dur {
				break
			}
			sleep(300, 800)
			run.Faults[k]++
			switch k {
			case sfCut:
				proxy.CutAll()
			case sfRefuse:
				proxy.Refuse(time.Duration(200+r.IntN(400)) * time.Millisecond)
				proxy.WaitListening()
			case sfLatency:
				proxy.SetLatency(time.Duration(1000+r.IntN(2000)) * time.Millisecond)
				time.Sleep(2 * time.Second)
				proxy.SetLatency(0)
			case sfCutAfter:
				proxy.CutAfter(int64(1 + r.IntN(600)))
				time.Sleep(300 * time.Millisecond)
				proxy.CutAfter(0)
			case sfRestart:
				crashes = append(crashes, [2]time.Time{time.Now()})
				srv.crash()
				crashes[len(crashes)-1][1] = time.Now()
				if err := srv.start(ctx); err != nil {
					run.InjectErr = err
				}
			}
		}
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	run.Recorded = time.Since(start)
	run.Proxy = proxy.Stats()
	if run.Proxy.ReopenFailures > 0 && run.InjectErr == nil {
		run.InjectErr = fmt.Errorf("the fault proxy could not listen on %s again after refusing", proxy.Addr())
	}
	if run.InjectErr != nil {
		t.Fatalf("%s: %v", b.name, run.InjectErr)
	}
	ops := sfPrepare(h, crashes, run)
	run.Operations = len(ops)
	run.Errors = h.errors[:min(len(h.errors), 5)]
	checkStart := time.Now()
	res, info := porcupine.CheckOperationsVerbose(sfModel, ops, 3*time.Minute)
	if b.retriedRelease {
		run.AsRecorded = res
		for i, op := range ops {
			if op.Input.(storeInput).Op == opRelease && op.Output.(storeOutput).Err == errLeaseLost {
				ops[i].Output = storeOutput{Err: errLeaseLostOrReleased}
				run.ReleasesRead++
			}
		}
		res, info = porcupine.CheckOperationsVerbose(sfModel, ops, 3*time.Minute)
	}
	run.Checked, run.Result = time.Since(checkStart), res
	if res == porcupine.Illegal {
		run.Listing = sfIllegalKey(ops)
		if dir := os.Getenv("RETRYSAFE_TORTURE_OUT"); dir != "" {
			sfSave(t, filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "-")+".json"), ops)
		}
		path := filepath.Join(t.TempDir(), strings.ReplaceAll(t.Name(), "/", "-")+".html")
		if f, err := os.Create(path); err == nil {
			if porcupine.Visualize(sfModel, info, f) == nil {
				run.Visualization = path
			}
			f.Close()
		}
	}
	return run
}

// sfPrepare makes the history of a fault run ready for the check. A call
// that failed keeps its pending-forever return (it may take effect at any
// point after its start, or never), with two exceptions that only make the
// check stricter or smaller, never laxer:
//
//   - A failed call returns at the latest when the first crash of the
//     server that began after the caller saw it fail had ended (the
//     process had exited). Every byte of the call was sent before it
//     failed, through a proxy connection to a process that was running
//     then (or had died already), and that process is dead once that crash
//     ended: it changes nothing more, and what it did is what its recovery
//     kept. The crash must begin after the failure, not after the call's
//     start: a client may retry a call on a new connection (go-redis
//     does) to the restarted server before the call fails.
//   - A failed call that cannot matter is left out: a Get (a read without
//     an answer constrains nothing) and an Extend, Complete or Release
//     whose token no claim of that key ever carried (the contract makes
//     it a no-op). Leaving out a call with an unknown outcome can only
//     turn a linearizable history into one that is not (the call could
//     always take effect last, where nothing sees it): a store that did
//     apply such a call is still caught.
func sfPrepare(h *StoreHistory, crashes [][2]time.Time, run *storeFaultRun) []porcupine.Operation {
	claimed := map[[2]string]bool{} // key, token
	for _, op := range h.ops {
		if in := op.Input.(storeInput); in.Op == opClaim {
			claimed[[2]string{in.Key, in.Token}] = true
		}
	}
	ops := make([]porcupine.Operation, 0, len(h.ops))
	for i, op := range h.ops {
		in := op.Input.(storeInput)
		if op.Output.(storeOutput).Err != errUnknown {
			ops = append(ops, op)
			continue
		}
		switch {
		case in.Op == opGet:
			run.DroppedGets++
			continue
		case in.Op != opClaim && !claimed[[2]string{in.Key, in.Token}]:
			run.DroppedNoOps++
			continue
		}
		run.Indeterminate++
		for _, c := range crashes {
			if c[0].Sub(h.start).Nanoseconds() > h.ended[i] {
				op.Return = c[1].Sub(h.start).Nanoseconds()
				run.BoundByCrash++
				break
			}
		}
		ops = append(ops, op)
	}
	return ops
}

// sfOp is one call of a saved history (sfSave, TestStoreFaultsSaved).
type sfOp struct {
	Client       int
	Call, Return int64
	In           storeInput
	Out          storeOutput
}

// sfSave writes the checked calls of a history as JSON.
func sfSave(t testing.TB, path string, ops []porcupine.Operation) {
	saved := make([]sfOp, len(ops))
	for i, op := range ops {
		saved[i] = sfOp{op.ClientId, op.Call, op.Return, op.Input.(storeInput), op.Output.(storeOutput)}
	}
	b, err := json.Marshal(saved)
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	t.Logf("history saved in %s (err %v); RETRYSAFE_STOREFAULT_HISTORY=%s go test -run TestStoreFaultsSaved checks it again", path, err, path)
}

// TestStoreFaultsSaved checks the history that RETRYSAFE_STOREFAULT_HISTORY
// names again (a second look at a failed run; skipped without it).
func TestStoreFaultsSaved(t *testing.T) {
	path := os.Getenv("RETRYSAFE_STOREFAULT_HISTORY")
	if path == "" {
		t.Skip("RETRYSAFE_STOREFAULT_HISTORY names no saved history")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var saved []sfOp
	if err := json.Unmarshal(b, &saved); err != nil {
		t.Fatal(err)
	}
	ops := make([]porcupine.Operation, len(saved))
	for i, op := range saved {
		ops[i] = porcupine.Operation{ClientId: op.Client, Call: op.Call, Return: op.Return, Input: op.In, Output: op.Out}
	}
	res, _ := porcupine.CheckOperationsVerbose(sfModel, ops, 3*time.Minute)
	t.Logf("%d operations: %s", len(ops), res)
	if res != porcupine.Ok {
		t.Errorf("not linearizable; the calls of a key that alone do not linearize:\n%s", sfIllegalKey(ops))
	}
}

// sfIllegalKey returns the calls of the first key whose calls alone are
// not linearizable, one a line in the order they started, with their
// times in milliseconds after the history's start ("…" for no return).
func sfIllegalKey(ops []porcupine.Operation) string {
	for _, part := range sfModel.Partition(ops) {
		if porcupine.CheckOperations(sfModel, part) {
			continue
		}
		part = append([]porcupine.Operation(nil), part...)
		slices.SortFunc(part, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		var b strings.Builder
		for _, op := range part {
			ret := "…"
			if op.Return < 1<<62 {
				ret = fmt.Sprintf("%.1f", float64(op.Return)/1e6)
			}
			fmt.Fprintf(&b, "[%.1f, %s] w%d %s\n", float64(op.Call)/1e6, ret, op.ClientId, storeModel.DescribeOperation(op.Input, op.Output))
		}
		return b.String()
	}
	return ""
}

// TestStoreFaultsLinearizable records a history against each networked
// store while faults hit the link to its server and the server itself, and
// requires it to linearize, with every kind of fault injected and unknown
// outcomes among the calls.
func TestStoreFaultsLinearizable(t *testing.T) {
	t.Parallel()
	dur := sfDuration(t)
	for _, b := range sfBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			run := runStoreFaults(t, b, dur, nil)
			t.Log(run)
			for _, e := range run.Errors {
				t.Logf("  a failed call: %s", e)
			}
			if run.Result != porcupine.Ok {
				t.Logf("the calls of a key that alone do not linearize:\n%s", run.Listing)
				if run.Visualization != "" {
					keepHTML(t, run.Visualization)
				}
				t.Fatalf("%s: the history under faults is not linearizable (%s)", b.name, run.Result)
			}
			var missing []string
			for _, k := range sfKinds {
				if run.Faults[k] == 0 {
					missing = append(missing, k)
				}
			}
			if len(missing) > 0 {
				t.Errorf("%s: no %s fault injected in %s", b.name, strings.Join(missing, ", "), dur)
			}
			if run.Indeterminate == 0 && !b.absorbs {
				t.Errorf("%s: no call had an unknown outcome: the faults did not reach the history", b.name)
			}
		})
	}
}

// TestStoreFaultsCatchUnfencedComplete runs the fault runs on a store that
// completes with the record's token instead of the caller's: the unknown
// outcomes of the faults must not hide it.
func TestStoreFaultsCatchUnfencedComplete(t *testing.T) {
	t.Parallel()
	dur := max(sfDuration(t)/2, 10*time.Second)
	for _, b := range sfBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			run := runStoreFaults(t, b, dur, func(s retrysafe.Store) retrysafe.Store { return unfencedComplete{s} })
			t.Log(run)
			if run.Result != porcupine.Illegal {
				t.Fatalf("%s: a store with an unfenced Complete passed under faults (%s)", b.name, run.Result)
			}
			if run.Indeterminate == 0 && !b.absorbs {
				t.Errorf("%s: no call had an unknown outcome: the mutant was not tried under faults", b.name)
			}
		})
	}
}

// TestUnknownOutcomeModel pins down what sfModel makes of a call that
// failed: it may take effect at any point between its start and its
// return (never, for a pending-forever one), or not at all, but not
// before its start, not after its return, and only as the contract
// allows; and of a Redis Release answered lease lost.
func TestUnknownOutcomeModel(t *testing.T) {
	t.Parallel()
	const never = 1 << 62
	claim := storeInput{Op: opClaim, Key: "k", FP: "A", Token: "t1", Now: 0, Dur: 5000}
	rec := recordView{Present: true, FP: "A", State: retrysafe.StateProcessing, Token: "t1", Attempt: 1, CreatedAt: 0, LeaseUntil: 5000}
	get := func(call, ret int64, out storeOutput) porcupine.Operation {
		return porcupine.Operation{ClientId: 1, Input: storeInput{Op: opGet, Key: "k", Now: 100}, Call: call, Output: out, Return: ret}
	}
	unknownClaim := porcupine.Operation{ClientId: 0, Input: claim, Call: 10, Output: storeOutput{Err: errUnknown}, Return: never}
	boundedClaim := unknownClaim
	boundedClaim.Return = 15
	claimed := porcupine.Operation{ClientId: 0, Input: claim, Call: 0, Output: storeOutput{Claimed: true, Rec: rec}, Return: 5}
	done := recordView{Present: true, FP: "A", State: retrysafe.StateCompleted, Token: "t1", Attempt: 1, ExpiresAt: 9000, Status: 200, Body: "b"}
	release := func(tok, err string) porcupine.Operation {
		return porcupine.Operation{ClientId: 2, Input: storeInput{Op: opRelease, Key: "k", Token: tok}, Call: 10, Output: storeOutput{Err: err}, Return: 15}
	}
	for _, c := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
		// storeModel is storeModel's verdict where it differs.
		storeModel porcupine.CheckResult
	}{
		{"took effect", []porcupine.Operation{unknownClaim, get(20, 30, storeOutput{Rec: rec})}, porcupine.Ok, ""},
		{"did not take effect", []porcupine.Operation{unknownClaim, get(20, 30, storeOutput{Err: errNotFound})}, porcupine.Ok, ""},
		{"took effect after a later read", []porcupine.Operation{unknownClaim, get(20, 30, storeOutput{Err: errNotFound}), get(40, 50, storeOutput{Rec: rec})}, porcupine.Ok, ""},
		{"not before its start", []porcupine.Operation{get(0, 5, storeOutput{Rec: rec}), unknownClaim}, porcupine.Illegal, ""},
		{"once only: no going back", []porcupine.Operation{unknownClaim, get(20, 30, storeOutput{Rec: rec}), get(40, 50, storeOutput{Err: errNotFound})}, porcupine.Illegal, ""},
		// A failed call that a crash ended: storeModel would have to apply it.
		{"bounded, did not take effect", []porcupine.Operation{boundedClaim, get(20, 30, storeOutput{Err: errNotFound})}, porcupine.Ok, porcupine.Illegal},
		{"bounded: not after its return", []porcupine.Operation{boundedClaim, get(20, 30, storeOutput{Err: errNotFound}), get(40, 50, storeOutput{Rec: rec})}, porcupine.Illegal, ""},
		{"an unknown complete with a bogus token cannot complete", []porcupine.Operation{
			claimed,
			{ClientId: 2, Input: storeInput{Op: opComplete, Key: "k", Token: "bogus", Now: 10, Dur: 9000 - 10, Body: "b"}, Call: 10, Output: storeOutput{Err: errUnknown}, Return: never},
			get(20, 30, storeOutput{Rec: recordView{Present: true, FP: "A", State: retrysafe.StateCompleted, Token: "t1", Attempt: 1, ExpiresAt: 9000, Status: 200, Body: "b"}}),
		}, porcupine.Illegal, ""},
		{"an unknown complete with the owner's token may complete", []porcupine.Operation{
			claimed,
			{ClientId: 0, Input: storeInput{Op: opComplete, Key: "k", Token: "t1", Now: 10, Dur: 9000 - 10, Body: "b"}, Call: 10, Output: storeOutput{Err: errUnknown}, Return: never},
			get(20, 30, storeOutput{Rec: done}),
		}, porcupine.Ok, ""},
		{"the owner's release read as lease lost or released deleted the record", []porcupine.Operation{
			claimed, release("t1", errLeaseLostOrReleased), get(20, 30, storeOutput{Err: errNotFound}),
		}, porcupine.Ok, porcupine.Illegal},
		{"the owner's release read as lease lost or released did not leave it", []porcupine.Operation{
			claimed, release("t1", errLeaseLostOrReleased), get(20, 30, storeOutput{Rec: rec}),
		}, porcupine.Illegal, ""},
		{"another's release read as lease lost or released changed nothing", []porcupine.Operation{
			claimed, release("bogus", errLeaseLostOrReleased), get(20, 30, storeOutput{Err: errNotFound}),
		}, porcupine.Illegal, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := porcupine.CheckOperations(sfModel, c.ops); got != (c.want == porcupine.Ok) {
				t.Errorf("sfModel: linearizable=%v, want %s", got, c.want)
			}
			want := c.want
			if c.storeModel != "" {
				want = c.storeModel
			}
			if got := porcupine.CheckOperations(storeModel, c.ops); got != (want == porcupine.Ok) {
				t.Errorf("storeModel: linearizable=%v, want %s", got, want)
			}
		})
	}
}
