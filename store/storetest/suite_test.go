package storetest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/storetest"
)

// The suite is tested by running it against stores broken on purpose
// (mutants of the memory store): each must fail the scenario that guards
// the rule it breaks, while the intact store passes the same scenario.
// Mutants run in a child process, since a failing suite fails its test.

const mutantEnv = "STORETEST_MUTANT"

// base delegates every method, optional ones included, to a memory store.
type base struct{ *memory.Store }

func newBase(t *testing.T) *memory.Store {
	s := memory.New(memory.Config{JanitorInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

// checkThenInsert reads, yields, then inserts: two claimants can both see
// the key absent and both win.
type checkThenInsert struct{ base }

func (s checkThenInsert) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	_, err := s.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: p.Now})
	if errors.Is(err, retrysafe.ErrNotFound) {
		runtime.Gosched()
		time.Sleep(time.Millisecond)
		_ = s.Delete(ctx, p.Scope, p.Key) // "insert" overwrites
	}
	return s.base.Claim(ctx, p)
}

// unfenced completes with whatever token currently owns the record.
type unfenced struct{ base }

func (s unfenced) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	err := s.base.Complete(ctx, p)
	if !errors.Is(err, retrysafe.ErrLeaseLost) {
		return err
	}
	rec, gerr := s.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: p.Now})
	if gerr != nil {
		return err
	}
	q := *p
	q.Token = rec.Token
	return s.base.Complete(ctx, &q)
}

// inPlace updates a record it returned, on Extend, instead of storing a
// new one: the caller's read-only record changes under it.
type inPlace struct {
	base
	mu       *sync.Mutex
	returned map[string]*retrysafe.Record
}

func (s inPlace) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	res, err := s.base.Claim(ctx, p)
	if err == nil {
		s.mu.Lock()
		s.returned[p.Scope+"\x00"+p.Key] = res.Record
		s.mu.Unlock()
	}
	return res, err
}

func (s inPlace) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	err := s.base.Extend(ctx, p)
	if err == nil {
		s.mu.Lock()
		if rec := s.returned[p.Scope+"\x00"+p.Key]; rec != nil {
			rec.LeaseUntil = p.Now.Add(p.Lease)
			rec.UpdatedAt = p.Now
		}
		s.mu.Unlock()
	}
	return err
}

// ignoresContext never looks at the caller's context.
type ignoresContext struct{ base }

func (s ignoresContext) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	return s.base.Claim(context.WithoutCancel(ctx), p)
}

func (s ignoresContext) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	return s.base.Complete(context.WithoutCancel(ctx), p)
}

// reordersHeaders stores multi-valued headers in reverse order.
type reordersHeaders struct{ base }

func (s reordersHeaders) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	q := *p
	q.Response = p.Response.Clone()
	for _, v := range q.Response.Header {
		slices.Reverse(v)
	}
	return s.base.Complete(ctx, &q)
}

// limited keeps bodies of up to 128 KiB and refuses larger ones, as a
// store with an item limit does (storetest.BodyLimiter): intact.
type limited struct{ base }

const limitedBody = 128 << 10

func (limited) MaxResponseBody() int64 { return limitedBody }

func (s limited) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	if p.Response != nil && len(p.Response.Body) > limitedBody {
		return errors.New("limited: body too large")
	}
	return s.base.Complete(ctx, p)
}

// limitNotEnforced states a limit and stores larger bodies anyway.
type limitNotEnforced struct{ base }

func (limitNotEnforced) MaxResponseBody() int64 { return limitedBody }

// limitTooLow states a limit and refuses bodies of that size.
type limitTooLow struct{ limited }

func (s limitTooLow) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	if p.Response != nil && len(p.Response.Body) >= limitedBody {
		return errors.New("limit-too-low: body too large")
	}
	return s.limited.Complete(ctx, p)
}

// TestLimitedStorePasses: a store that keeps bodies up to its stated
// limit, and refuses larger ones whole, passes the LargeBody scenario.
func TestLimitedStorePasses(t *testing.T) {
	if os.Getenv(mutantEnv) != "" {
		t.Skip("child process")
	}
	t.Parallel()
	storetest.Run(t, func(t *testing.T) retrysafe.Store { return limited{base{newBase(t)}} })
}

// truncatesBodies keeps only the first MiB of a body.
type truncatesBodies struct{ base }

func (s truncatesBodies) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	q := *p
	q.Response = p.Response.Clone()
	if len(q.Response.Body) > 1<<20 {
		q.Response.Body = q.Response.Body[:1<<20]
	}
	return s.base.Complete(ctx, &q)
}

// mangles8Bit stores header values the way a JSON string encoding does:
// bytes that are not UTF-8 become U+FFFD.
type mangles8Bit struct{ base }

func (s mangles8Bit) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	q := *p
	q.Response = p.Response.Clone()
	for _, vs := range q.Response.Header {
		for i, v := range vs {
			vs[i] = strings.ToValidUTF8(v, "\uFFFD")
		}
	}
	return s.base.Complete(ctx, &q)
}

// wallClock claims with the store's clock instead of params.Now.
type wallClock struct{ base }

func (s wallClock) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	q := *p
	q.Now = time.Now()
	return s.base.Claim(ctx, &q)
}

// sweepsEverything deletes processing records too.
type sweepsEverything struct{ base }

func (s sweepsEverything) Sweep(ctx context.Context, p *admin.SweepParams) (int, error) {
	n, err := s.base.Sweep(ctx, p)
	if err != nil {
		return n, err
	}
	recs, err := s.List(ctx, &admin.ListParams{Limit: 1000})
	for _, rec := range recs {
		if rec.State == retrysafe.StateProcessing && s.Delete(ctx, rec.Scope, rec.Key) == nil {
			n++
		}
	}
	return n, err
}

// neverRetires keeps processing records forever, however long ago their
// lease ran out.
type neverRetires struct{ base }

func (s neverRetires) Sweep(ctx context.Context, p *admin.SweepParams) (int, error) {
	q := *p
	q.ProcessingRetention = 1 << 62
	return s.base.Sweep(ctx, &q)
}

// retiresAtLeaseEnd ignores ProcessingRetention: it retires a processing
// record as soon as its lease runs out.
type retiresAtLeaseEnd struct{ base }

func (s retiresAtLeaseEnd) Sweep(ctx context.Context, p *admin.SweepParams) (int, error) {
	q := *p
	q.ProcessingRetention = time.Nanosecond
	return s.base.Sweep(ctx, &q)
}

// ignoresCursor lists from the start every time.
type ignoresCursor struct{ base }

func (s ignoresCursor) List(ctx context.Context, p *admin.ListParams) ([]*retrysafe.Record, error) {
	q := *p
	q.AfterScope, q.AfterKey = "", ""
	return s.base.List(ctx, &q)
}

// untranslated returns the backend's errors without wrapping them.
type untranslated struct{ base }

func (s untranslated) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	rec, err := s.base.Get(ctx, p)
	if err != nil {
		return nil, errors.New("connection refused")
	}
	return rec, nil
}

// takeoverDropsCheckpoint forgets the checkpoint on a takeover: the new
// owner cannot resume.
type takeoverDropsCheckpoint struct{ base }

func (s takeoverDropsCheckpoint) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	res, err := s.base.Claim(ctx, p)
	if err != nil || !res.Claimed || res.Record.Checkpoint == nil {
		return res, err
	}
	rec := res.Record.Clone()
	rec.Checkpoint = nil
	return &retrysafe.ClaimResult{Claimed: true, Record: rec}, nil
}

// abandonUnfenced abandons whatever attempt holds the record.
type abandonUnfenced struct{ base }

func (s abandonUnfenced) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	err := s.base.Extend(ctx, p)
	if !p.Abandon || !errors.Is(err, retrysafe.ErrLeaseLost) {
		return err
	}
	rec, gerr := s.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: p.Now})
	if gerr != nil {
		return err
	}
	q := *p
	q.Token = rec.Token
	return s.base.Extend(ctx, &q)
}

// abandonRenews renews the lease when it abandons, so the unknown outcome
// blocks retries for a whole new lease.
type abandonRenews struct{ base }

func (s abandonRenews) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	if p.Abandon {
		q := *p
		q.Abandon = false
		if err := s.base.Extend(ctx, &q); err != nil {
			return err
		}
	}
	return s.base.Extend(ctx, p)
}

// checkpointUnfenced stores a checkpoint whoever writes it.
type checkpointUnfenced struct{ base }

func (s checkpointUnfenced) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	err := s.base.Extend(ctx, p)
	if p.Checkpoint == nil || !errors.Is(err, retrysafe.ErrLeaseLost) {
		return err
	}
	rec, gerr := s.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: p.Now})
	if gerr != nil || rec.State != retrysafe.StateProcessing {
		return err
	}
	q := *p
	q.Token = rec.Token
	_ = s.base.Extend(ctx, &q)
	return err
}

// ignoresNoTakeover takes expired leases over whatever the claim says.
type ignoresNoTakeover struct{ base }

func (s ignoresNoTakeover) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	q := *p
	q.NoTakeover = false
	return s.base.Claim(ctx, &q)
}

// ignoresTakeoverToken takes expired leases over whoever holds them.
type ignoresTakeoverToken struct{ base }

func (s ignoresTakeoverToken) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	q := *p
	q.TakeoverToken = ""
	return s.base.Claim(ctx, &q)
}

// forgetsAbandoned drops the abandoned mark from what Admin returns.
type forgetsAbandoned struct{ base }

func (s forgetsAbandoned) Stats(ctx context.Context, p *admin.StatsParams) (*admin.Stats, error) {
	recs, err := s.List(ctx, &admin.ListParams{Limit: 1000})
	if err != nil {
		return nil, err
	}
	for n, rec := range recs {
		c := rec.Clone()
		c.Abandoned = false
		recs[n] = c
	}
	return admin.StatsOf(recs, p), nil
}

// mutants maps a mutant's name to its store and the suite entry point and
// scenario that must catch it.
var mutants = map[string]struct {
	newStore func(t *testing.T) retrysafe.Store
	run      func(t *testing.T, newStore func(t *testing.T) retrysafe.Store)
	scenario string
}{
	"check-then-insert": {func(t *testing.T) retrysafe.Store { return checkThenInsert{base{newBase(t)}} }, storetest.Run, "ConcurrentClaims"},
	"unfenced":          {func(t *testing.T) retrysafe.Store { return unfenced{base{newBase(t)}} }, storetest.Run, "FencingAfterTakeover"},
	"in-place": {func(t *testing.T) retrysafe.Store {
		return inPlace{base{newBase(t)}, new(sync.Mutex), map[string]*retrysafe.Record{}}
	}, storetest.Run, "Copies"},
	"ignores-context":           {func(t *testing.T) retrysafe.Store { return ignoresContext{base{newBase(t)}} }, storetest.Run, "CancelledContext"},
	"reorders-headers":          {func(t *testing.T) retrysafe.Store { return reordersHeaders{base{newBase(t)}} }, storetest.Run, "CompleteReplay"},
	"limit-not-enforced":        {func(t *testing.T) retrysafe.Store { return limitNotEnforced{base{newBase(t)}} }, storetest.Run, "LargeBody"},
	"limit-too-low":             {func(t *testing.T) retrysafe.Store { return limitTooLow{limited{base{newBase(t)}}} }, storetest.Run, "LargeBody"},
	"truncates-bodies":          {func(t *testing.T) retrysafe.Store { return truncatesBodies{base{newBase(t)}} }, storetest.Run, "LargeBody"},
	"mangles-8-bit":             {func(t *testing.T) retrysafe.Store { return mangles8Bit{base{newBase(t)}} }, storetest.Run, "ExactBytes"},
	"wall-clock":                {func(t *testing.T) retrysafe.Store { return wallClock{base{newBase(t)}} }, storetest.Run, "ClaimNew"},
	"sweeps-everything":         {func(t *testing.T) retrysafe.Store { return sweepsEverything{base{newBase(t)}} }, storetest.Run, "Sweeper"},
	"never-retires":             {func(t *testing.T) retrysafe.Store { return neverRetires{base{newBase(t)}} }, storetest.Run, "SweepRetention"},
	"retires-at-lease-end":      {func(t *testing.T) retrysafe.Store { return retiresAtLeaseEnd{base{newBase(t)}} }, storetest.Run, "SweepRetention"},
	"ignores-cursor":            {func(t *testing.T) retrysafe.Store { return ignoresCursor{base{newBase(t)}} }, storetest.Run, "AdminList"},
	"takeover-drops-checkpoint": {func(t *testing.T) retrysafe.Store { return takeoverDropsCheckpoint{base{newBase(t)}} }, storetest.Run, "TakeoverKeepsCheckpoint"},
	"abandon-unfenced":          {func(t *testing.T) retrysafe.Store { return abandonUnfenced{base{newBase(t)}} }, storetest.Run, "Abandon"},
	"abandon-renews":            {func(t *testing.T) retrysafe.Store { return abandonRenews{base{newBase(t)}} }, storetest.Run, "Abandon"},
	"checkpoint-unfenced":       {func(t *testing.T) retrysafe.Store { return checkpointUnfenced{base{newBase(t)}} }, storetest.Run, "CheckpointFenced"},
	"ignores-no-takeover":       {func(t *testing.T) retrysafe.Store { return ignoresNoTakeover{base{newBase(t)}} }, storetest.Run, "NoTakeover"},
	"ignores-takeover-token":    {func(t *testing.T) retrysafe.Store { return ignoresTakeoverToken{base{newBase(t)}} }, storetest.Run, "TakeoverToken"},
	"forgets-abandoned":         {func(t *testing.T) retrysafe.Store { return forgetsAbandoned{base{newBase(t)}} }, storetest.Run, "AdminUnknown"},
	"untranslated": {func(t *testing.T) retrysafe.Store {
		s := newBase(t)
		s.Close()
		return untranslated{base{s}}
	}, storetest.RunUnavailable, "Get"},
}

// TestMutantChild runs one mutant through the suite. It runs only in the
// child process TestSuiteCatchesBrokenStores starts.
func TestMutantChild(t *testing.T) {
	name := os.Getenv(mutantEnv)
	if name == "" {
		t.Skip("runs only as a child of TestSuiteCatchesBrokenStores")
	}
	if name == "intact" {
		storetest.Run(t, func(t *testing.T) retrysafe.Store { return base{newBase(t)} })
		return
	}
	m, ok := mutants[name]
	if !ok {
		t.Fatalf("unknown mutant %q", name)
	}
	m.run(t, m.newStore)
}

func TestSuiteCatchesBrokenStores(t *testing.T) {
	if os.Getenv(mutantEnv) != "" {
		t.Skip("child process")
	}
	t.Parallel()
	child := func(t *testing.T, mutant, scenario string) (string, error) {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestMutantChild$/^"+scenario+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), mutantEnv+"="+mutant)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Run("intact", func(t *testing.T) {
		t.Parallel()
		if out, err := child(t, "intact", ".*"); err != nil || !strings.Contains(out, "PASS") {
			t.Errorf("the suite fails the intact memory store: %v\n%s", err, out)
		}
	})
	for name, m := range mutants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, err := child(t, name, m.scenario)
			if err == nil || !strings.Contains(out, "--- FAIL: TestMutantChild/"+m.scenario) {
				t.Errorf("scenario %s passed a store that is %s (err %v); output:\n%s", m.scenario, name, err, out)
			}
		})
	}
}
