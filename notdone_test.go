package retrysafe_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// fencedEffect is a library user's operation against a downstream that
// keeps the promise a not-done answer asks for: once its Resolver said
// attempt N of a key did not happen, the downstream refuses attempts up
// to N of that key (a late attempt N may still arrive). Its first attempt
// of every key records a checkpoint and gives up without a result.
type fencedEffect struct {
	t *testing.T

	mu       sync.Mutex
	fence    map[string]int      // the highest attempt declared not done, by key
	asked    map[string][]int    // the attempts the Resolver was asked about, by key
	seen     map[string][]string // the Resolver's view of the checkpoint, by key
	attempts map[string][]int    // the attempts that ran, by key
	resumed  map[string][]string // what each attempt resumed from, by key
	effects  map[string]int
}

func newFencedEffect(t *testing.T) *fencedEffect {
	return &fencedEffect{t: t, fence: map[string]int{}, asked: map[string][]int{}, seen: map[string][]string{},
		attempts: map[string][]int{}, resumed: map[string][]string{}, effects: map[string]int{}}
}

// resolve is the Resolver: the effect never happened, so not done.
func (f *fencedEffect) resolve(_ context.Context, rec *retrysafe.Record) (retrysafe.Resolution, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked[rec.Key] = append(f.asked[rec.Key], rec.Attempt)
	cp := "none"
	if rec.Checkpoint != nil {
		cp = rec.Checkpoint.Name + ":" + string(rec.Checkpoint.Data)
	}
	f.seen[rec.Key] = append(f.seen[rec.Key], cp)
	f.fence[rec.Key] = max(f.fence[rec.Key], rec.Attempt)
	return retrysafe.Resolution{Action: retrysafe.ResolveRerun}, nil
}

// run is the operation: abandon is how many attempts give up (after a
// checkpoint on attempt 1) before one performs the effect.
func (f *fencedEffect) run(key string, abandon int) func(ctx context.Context) *retrysafe.Response {
	return func(ctx context.Context) *retrysafe.Response {
		op := retrysafe.OperationFromContext(ctx)
		f.mu.Lock()
		defer f.mu.Unlock()
		a := op.Attempt()
		f.attempts[key] = append(f.attempts[key], a)
		if name, data, ok := op.Resumed(); ok {
			f.resumed[key] = append(f.resumed[key], name+":"+string(data))
		} else {
			f.resumed[key] = append(f.resumed[key], "none")
		}
		switch {
		case a <= f.fence[key]:
			return &retrysafe.Response{Status: http.StatusConflict, Body: []byte("fenced")}
		case a <= abandon:
			if a == 1 {
				if err := op.Checkpoint(ctx, "charge-requested", []byte("ref-1")); err != nil {
					f.t.Errorf("Checkpoint: %v", err)
				}
			}
			op.Abandon()
			return nil
		}
		f.effects[key]++
		return created("charged")
	}
}

// TestResolveStrandedNotDoneAwaitsRetry: a completer that hears "not
// done" about attempt 1 marks the record resolved not done instead of
// releasing it, so the retry runs as attempt 2, which the downstream's
// fence admits. (A release would start the retry again at attempt 1,
// which the fence refuses: the key could never run.) The retry takes the
// marked record over without asking the Resolver again, under every
// policy, and resumes from attempt 1's checkpoint.
func TestResolveStrandedNotDoneAwaitsRetry(t *testing.T) {
	t.Parallel()
	for name, retry := range map[string]func(f *fencedEffect) retrysafe.Config{
		"takeover":               func(*fencedEffect) retrysafe.Config { return retrysafe.Config{} },
		"takeover with Resolver": func(f *fencedEffect) retrysafe.Config { return retrysafe.Config{Resolver: f.resolve} },
		"block":                  func(*fencedEffect) retrysafe.Config { return retrysafe.Config{OnUnknown: retrysafe.OnUnknownBlock} },
		"block with Resolver": func(f *fencedEffect) retrysafe.Config {
			return retrysafe.Config{OnUnknown: retrysafe.OnUnknownBlock, Resolver: f.resolve}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFencedEffect(t)
			u := newUnknownSetup(t, retrysafe.Config{Resolver: f.resolve}) // u.x is the completer
			cfg := retry(f)
			cfg.Store, cfg.Now, cfg.Lease, cfg.Logger = u.store, u.clock.Now, uLease, quiet
			x, err := retrysafe.NewExecutor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := x.Execute(context.Background(), "s", "k", "fp", f.run("k", 1)); err != nil {
				t.Fatalf("attempt 1: %v", err)
			}
			u.clock.Set(u0.Add(uLease))
			rec := u.record(t, "k")
			n, err := u.x.ResolveStranded(context.Background(), []*retrysafe.Record{rec})
			if want := (retrysafe.Stranded{AwaitingRetry: 1}); err != nil || n != want {
				t.Fatalf("ResolveStranded = %+v, %v; want %+v", n, err, want)
			}
			marked, err := u.store.Get(context.Background(), &retrysafe.GetParams{Scope: "s", Key: "k", Now: u.clock.Now()})
			switch {
			case err != nil || marked.State != retrysafe.StateProcessing || marked.Attempt != 1 || !marked.ResolvedNotDone() || !marked.Abandoned || !marked.LeaseUntil.Equal(rec.LeaseUntil):
				t.Errorf("record after the completer's not done: %+v, %v; want it processing at attempt 1, resolved not done, abandoned, its lease as it was", marked, err)
			default:
				// A later pass does not ask about it again.
				if n, err := u.x.ResolveStranded(context.Background(), []*retrysafe.Record{marked}); err != nil || n != (retrysafe.Stranded{Skipped: 1}) {
					t.Errorf("a second pass = %+v, %v; want it skipped", n, err)
				}
			}

			resp, replayed, err := x.Execute(context.Background(), "s", "k", "fp", f.run("k", 1))
			if err != nil || replayed || resp.Status != http.StatusCreated {
				t.Fatalf("the retry = %+v, %v, %v; want it run, 201", resp, replayed, err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if got := fmt.Sprint(f.attempts["k"]); got != "[1 2]" {
				t.Errorf("attempts that ran = %s, want [1 2]", got)
			}
			if got := fmt.Sprint(f.asked["k"]); got != "[1]" {
				t.Errorf("the Resolver was asked about attempts %s, want [1] (once, by the completer)", got)
			}
			if got := f.resumed["k"]; len(got) != 2 || got[1] != "charge-requested:ref-1" {
				t.Errorf("the retry resumed from %q, want attempt 1's checkpoint charge-requested:ref-1", got)
			}
			if f.effects["k"] != 1 {
				t.Errorf("effects = %d, want 1", f.effects["k"])
			}
			if done := u.record(t, "k"); done.State != retrysafe.StateCompleted || string(done.Response.Body) != "charged" {
				t.Errorf("record after the retry: %+v", done)
			}
		})
	}
}

// TestResolveStrandedNotDoneTwice: an attempt that took a marked record
// over and was stranded in turn, recording no checkpoint of its own, is
// asked about with the checkpoint it stands on (attempt 1's, never the
// mark), marked again at its own attempt (the mark keeps that checkpoint,
// not the earlier mark), and the next retry resumes from it.
func TestResolveStrandedNotDoneTwice(t *testing.T) {
	t.Parallel()
	f := newFencedEffect(t)
	u := newUnknownSetup(t, retrysafe.Config{Resolver: f.resolve})
	for attempt := 1; attempt <= 3; attempt++ {
		u.clock.Set(u0.Add(time.Duration(attempt-1) * 2 * uLease))
		resp, _, err := u.x.Execute(context.Background(), "s", "k", "fp", f.run("k", 2))
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		if attempt < 3 {
			if resp != nil {
				t.Fatalf("attempt %d answered %+v, want it abandoned", attempt, resp)
			}
			u.clock.Set(u.clock.Now().Add(uLease))
			if n, err := u.x.ResolveStranded(context.Background(), []*retrysafe.Record{u.record(t, "k")}); err != nil || n.AwaitingRetry != 1 {
				t.Fatalf("ResolveStranded after attempt %d = %+v, %v", attempt, n, err)
			}
			if rec := u.record(t, "k"); !rec.ResolvedNotDone() || rec.Attempt != attempt {
				t.Fatalf("record after attempt %d was resolved not done: %+v", attempt, rec)
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got := fmt.Sprint(f.attempts["k"]); got != "[1 2 3]" {
		t.Errorf("attempts that ran = %s, want [1 2 3]", got)
	}
	if got := fmt.Sprint(f.seen["k"]); got != "[charge-requested:ref-1 charge-requested:ref-1]" {
		t.Errorf("the Resolver read the checkpoints %s, want attempt 1's both times", got)
	}
	if got := fmt.Sprint(f.resumed["k"]); got != "[none charge-requested:ref-1 charge-requested:ref-1]" {
		t.Errorf("the attempts resumed from %s", got)
	}
	if f.effects["k"] != 1 {
		t.Errorf("effects = %d, want 1", f.effects["k"])
	}
}

// TestNotDoneMarkFormat: the mark is the checkpoint "retrysafe-not-done
// attempt=N" of the record's current attempt; any other name, or a mark
// of another attempt, is no mark; and an application cannot write a
// checkpoint that would read as one.
func TestNotDoneMarkFormat(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cp      string
		attempt int
		state   retrysafe.State
		want    bool
	}{
		"marked":        {"retrysafe-not-done attempt=3", 3, retrysafe.StateProcessing, true},
		"older attempt": {"retrysafe-not-done attempt=2", 3, retrysafe.StateProcessing, false},
		"completed":     {"retrysafe-not-done attempt=3", 3, retrysafe.StateCompleted, false},
		"leading 0":     {"retrysafe-not-done attempt=03", 3, retrysafe.StateProcessing, false},
		"suffix":        {"retrysafe-not-done attempt=3 x", 3, retrysafe.StateProcessing, false},
		"zero":          {"retrysafe-not-done attempt=0", 0, retrysafe.StateProcessing, false},
		"other":         {"charge-requested", 3, retrysafe.StateProcessing, false},
	} {
		rec := &retrysafe.Record{State: tc.state, Attempt: tc.attempt, Checkpoint: &retrysafe.Checkpoint{Name: tc.cp}}
		if got := rec.ResolvedNotDone(); got != tc.want {
			t.Errorf("%s: ResolvedNotDone = %v, want %v", name, got, tc.want)
		}
	}
	if (&retrysafe.Record{State: retrysafe.StateProcessing, Attempt: 1}).ResolvedNotDone() {
		t.Error("a record without a checkpoint reads as resolved not done")
	}

	u := newUnknownSetup(t, retrysafe.Config{})
	_, _, err := u.x.Execute(context.Background(), "s", "k", "fp", func(ctx context.Context) *retrysafe.Response {
		op := retrysafe.OperationFromContext(ctx)
		if err := op.Checkpoint(ctx, "retrysafe-not-done attempt=1", nil); err == nil || !strings.Contains(err.Error(), "reserves") {
			t.Errorf("Checkpoint with the mark's name: %v, want it refused", err)
		}
		if err := op.AbandonWith("retrysafe-not-done attempt=1", nil); err == nil {
			t.Error("AbandonWith the mark's name succeeded")
		}
		return created("ok")
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNotDoneMarkBounded: the mark keeps a checkpoint within the engine's
// limits, so its data stays within the room CheckpointStoreLimit leaves
// for wrappers; a larger one (written through a store directly) is not
// kept, and the retry starts from the beginning.
func TestNotDoneMarkBounded(t *testing.T) {
	t.Parallel()
	for name, size := range map[string]int{"at the limit": retrysafe.MaxCheckpointData, "over it": retrysafe.MaxCheckpointData + 1} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := newUnknownSetup(t, retrysafe.Config{Resolver: func(context.Context, *retrysafe.Record) (retrysafe.Resolution, error) {
				return retrysafe.Resolution{Action: retrysafe.ResolveRerun}, nil
			}})
			u.strand(t, "k", "", nil)
			rec := u.record(t, "k")
			big := &retrysafe.Checkpoint{Name: strings.Repeat("n", retrysafe.MaxCheckpointName), Data: make([]byte, size)}
			if err := u.store.Extend(context.Background(), &retrysafe.ExtendParams{Scope: "s", Key: "k", Token: rec.Token, Now: u0, Abandon: true, Checkpoint: big}); err != nil {
				t.Fatal(err)
			}
			u.clock.Set(u0.Add(uLease))
			if n, err := u.x.ResolveStranded(context.Background(), []*retrysafe.Record{u.record(t, "k")}); err != nil || n.AwaitingRetry != 1 {
				t.Fatalf("ResolveStranded = %+v, %v", n, err)
			}
			mark := u.record(t, "k").Checkpoint
			if len(mark.Data) > retrysafe.MaxCheckpointData+retrysafe.MaxCheckpointName+1 {
				t.Errorf("the mark holds %d bytes of data, more than MaxCheckpointData + MaxCheckpointName + 1 (the name's length)", len(mark.Data))
			}
			var resumed bool
			if _, _, err := u.x.Execute(context.Background(), "s", "k", "fp", func(ctx context.Context) *retrysafe.Response {
				name, data, ok := retrysafe.OperationFromContext(ctx).Resumed()
				resumed = ok && name == big.Name && len(data) == size
				return created("ok")
			}); err != nil {
				t.Fatal(err)
			}
			if want := size <= retrysafe.MaxCheckpointData; resumed != want {
				t.Errorf("the retry resumed from the checkpoint: %v, want %v", resumed, want)
			}
		})
	}
}
