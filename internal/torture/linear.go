package torture

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/retrysafe/retrysafe"
)

// Store operations of a store-level history.
const (
	opClaim    = "claim"
	opGet      = "get"
	opExtend   = "extend"
	opComplete = "complete"
	opRelease  = "release"
	opSweep    = "sweep" // Sweeper.Sweep: only the spec's replay makes it (spec_test.go)
)

// storeInput is one store call. Times are milliseconds after the history's
// base time (the Now the caller injects).
type storeInput struct {
	Op    string
	Key   string
	FP    string // claim
	Token string // claim (the new token), extend, complete, release
	Now   int64  // claim, get, extend, complete
	Dur   int64  // claim and extend: lease; complete: TTL
	Body  string // complete: the stored body
	// NoTakeover and TakeoverToken are ClaimParams'; Abandon and
	// Checkpoint (its name; "" for none) are ExtendParams'.
	NoTakeover    bool
	TakeoverToken string
	Abandon       bool
	Checkpoint    string
}

// Error classes of a store-level output.
const (
	errNone      = ""
	errLeaseLost = "lease-lost"
	errNotFound  = "not-found"
	errUnknown   = "unknown" // the call failed: it may or may not have taken effect
)

// recordView is the part of a record the contract in store.go fixes,
// as a comparable value. Present is false for "no record".
type recordView struct {
	Present    bool
	FP         string
	State      retrysafe.State
	Token      string
	Attempt    int
	CreatedAt  int64
	LeaseUntil int64 // processing only
	ExpiresAt  int64 // completed only
	Status     int
	Body       string
	Abandoned  bool
	Checkpoint string // the checkpoint's name, "" for none
}

func (v recordView) String() string {
	if !v.Present {
		return "absent"
	}
	var extra string
	if v.Abandoned {
		extra += " abandoned"
	}
	if v.Checkpoint != "" {
		extra += " checkpoint=" + v.Checkpoint
	}
	if v.State == retrysafe.StateProcessing {
		return fmt.Sprintf("processing fp=%s tok=%s att=%d created=%d lease<%d%s", v.FP, short(v.Token), v.Attempt, v.CreatedAt, v.LeaseUntil, extra)
	}
	return fmt.Sprintf("completed fp=%s tok=%s att=%d created=%d expires=%d %d %q%s", v.FP, short(v.Token), v.Attempt, v.CreatedAt, v.ExpiresAt, v.Status, v.Body, extra)
}

func short(tok string) string {
	if len(tok) > 6 {
		return tok[:6]
	}
	return tok
}

// storeOutput is what a store call returned.
type storeOutput struct {
	Err     string
	Claimed bool
	Rec     recordView
}

// storeModel is the sequential specification of one key's record, as the
// Store doc comment in store.go states it.
var storeModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(storeInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return recordView{} },
	Step: func(state, input, output any) (bool, any) {
		next, want := storeStep(state.(recordView), input.(storeInput))
		out := output.(storeOutput)
		if out.Err == errUnknown {
			return true, next
		}
		return out == want, next
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(storeInput), output.(storeOutput)
		args := fmt.Sprintf("now=%d", in.Now)
		switch in.Op {
		case opClaim:
			args = fmt.Sprintf("fp=%s tok=%s now=%d lease=%d", in.FP, short(in.Token), in.Now, in.Dur)
			if in.NoTakeover {
				args += " no-takeover"
			}
			if in.TakeoverToken != "" {
				args += " takeover-token=" + short(in.TakeoverToken)
			}
		case opExtend:
			args = fmt.Sprintf("tok=%s now=%d lease=%d", short(in.Token), in.Now, in.Dur)
			if in.Abandon {
				args += " abandon"
			}
			if in.Checkpoint != "" {
				args += " checkpoint=" + in.Checkpoint
			}
		case opSweep:
			args = fmt.Sprintf("now=%d retention=%d", in.Now, in.Dur)
		case opComplete:
			args = fmt.Sprintf("tok=%s now=%d ttl=%d %q", short(in.Token), in.Now, in.Dur, in.Body)
		case opRelease:
			args = "tok=" + short(in.Token)
		}
		res := out.Err
		switch {
		case out.Err != errNone:
		case in.Op == opClaim:
			res = fmt.Sprintf("claimed=%v %s", out.Claimed, out.Rec)
		case in.Op == opGet:
			res = out.Rec.String()
		default:
			res = "ok"
		}
		return fmt.Sprintf("%s(%s %s) → %s", in.Op, in.Key, args, res)
	},
	DescribeState: func(state any) string { return state.(recordView).String() },
}

// storeStep applies in to state and returns the new state and the output
// the contract demands. Its transitions are the ones spec/retrysafe.pml
// gives the store (TestSpecTransitions replays the model against it).
func storeStep(s recordView, in storeInput) (recordView, storeOutput) {
	live := s.Present && !(s.State == retrysafe.StateCompleted && s.ExpiresAt <= in.Now)
	owned := s.Present && s.State == retrysafe.StateProcessing && s.Token == in.Token
	switch in.Op {
	case opClaim:
		switch {
		case !live:
			n := recordView{Present: true, FP: in.FP, State: retrysafe.StateProcessing, Token: in.Token, Attempt: 1, CreatedAt: in.Now, LeaseUntil: in.Now + in.Dur}
			return n, storeOutput{Claimed: true, Rec: n}
		case s.State == retrysafe.StateProcessing && s.LeaseUntil <= in.Now && s.FP == in.FP &&
			!in.NoTakeover && (in.TakeoverToken == "" || in.TakeoverToken == s.Token):
			// A takeover keeps CreatedAt and the checkpoint.
			n := s
			n.Token, n.Attempt, n.LeaseUntil, n.Abandoned = in.Token, s.Attempt+1, in.Now+in.Dur, false
			return n, storeOutput{Claimed: true, Rec: n}
		default:
			return s, storeOutput{Rec: s}
		}
	case opGet:
		if !live {
			return s, storeOutput{Err: errNotFound}
		}
		return s, storeOutput{Rec: s}
	case opExtend:
		if !owned {
			return s, storeOutput{Err: errLeaseLost}
		}
		n := s
		if in.Abandon {
			n.Abandoned = true // the lease is left as it is
		} else {
			n.LeaseUntil = in.Now + in.Dur
		}
		if in.Checkpoint != "" {
			n.Checkpoint = in.Checkpoint
		}
		return n, storeOutput{}
	case opComplete:
		if !owned {
			return s, storeOutput{Err: errLeaseLost}
		}
		n := s
		n.State, n.LeaseUntil, n.ExpiresAt, n.Status, n.Body = retrysafe.StateCompleted, 0, in.Now+in.Dur, 200, in.Body
		n.Abandoned = false
		return n, storeOutput{}
	case opRelease:
		if !owned {
			return s, storeOutput{Err: errLeaseLost}
		}
		return recordView{}, storeOutput{}
	case opSweep:
		// Processing records whose lease ended Dur ago are retired;
		// completed ones past ExpiresAt are deleted.
		if s.Present && (s.State == retrysafe.StateProcessing && s.LeaseUntil+in.Dur <= in.Now || !live) {
			return recordView{}, storeOutput{}
		}
		return s, storeOutput{}
	}
	panic("unknown store operation " + in.Op)
}

// StoreWorkload shapes a store-level history.
type StoreWorkload struct {
	Workers int // concurrent callers; default 6
	Ops     int // calls per worker; default 150
	Keys    int // keys shared by the workers; default 3
	// Seed makes the choice of operations reproducible (the interleaving
	// is not); 0 picks one.
	Seed uint64
	// Stop, when not nil, ends the workload once it is closed: each worker
	// stops before its next call (Ops is then the most it makes).
	Stop <-chan struct{}
}

// StoreHistory is a recorded concurrent history of store calls.
type StoreHistory struct {
	ops    []porcupine.Operation
	errors []string
	start  time.Time // the ops' Call and Return are nanoseconds after it
	ended  []int64   // per op, when its call returned (Return is 1<<62 for a failed one)
}

// RecordStore runs the workload against s and records every call.
func RecordStore(ctx context.Context, s retrysafe.Store, w StoreWorkload) *StoreHistory {
	if w.Workers == 0 {
		w.Workers = 6
	}
	if w.Ops == 0 {
		w.Ops = 150
	}
	if w.Keys == 0 {
		w.Keys = 3
	}
	if w.Seed == 0 {
		w.Seed = rand.Uint64()
	}
	base := time.Now().Truncate(time.Second)
	scope := "torture"
	start := time.Now()
	var (
		mu    sync.Mutex
		h     = StoreHistory{start: start}
		clock sync.Mutex
		now   int64 // the virtual clock, ms after base: moves 0–2s per call
		wg    sync.WaitGroup
	)
	tick := func(r *rand.Rand) int64 {
		clock.Lock()
		defer clock.Unlock()
		now += r.Int64N(2000)
		return max(0, now+r.Int64N(4000)-2000)
	}
	for worker := range w.Workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(w.Seed, uint64(worker)))
			tokens := map[string][]string{} // per key, the tokens this worker claimed with
			for i := range w.Ops {
				if stopped(w.Stop) {
					break
				}
				key := fmt.Sprintf("k%d", r.IntN(w.Keys))
				in := storeInput{Key: key, Now: tick(r)}
				token := func() string {
					t := tokens[key]
					switch {
					case len(t) == 0 || r.IntN(10) == 0:
						return fmt.Sprintf("bogus-%d-%d", worker, i)
					case r.IntN(10) < 7:
						return t[len(t)-1]
					default:
						return t[r.IntN(len(t))]
					}
				}
				switch p := r.IntN(100); {
				case p < 35:
					in.Op, in.Token, in.Dur = opClaim, retrysafe.NewToken(), 1000*(1+r.Int64N(10))
					in.FP = "A"
					if r.IntN(5) == 0 {
						in.FP = "B"
					}
				case p < 55:
					in.Op = opGet
				case p < 67:
					in.Op, in.Token, in.Dur = opExtend, token(), 1000*(1+r.Int64N(10))
				case p < 87:
					in.Op, in.Token, in.Dur = opComplete, token(), 1000*(1+r.Int64N(20))
					in.Body = fmt.Sprintf("w%d-%d", worker, i)
				default:
					in.Op, in.Token = opRelease, token()
				}
				call := time.Since(start).Nanoseconds()
				out, err := callStore(ctx, s, scope, base, in)
				ret := time.Since(start).Nanoseconds()
				failed := ret // when the caller saw the call fail
				if err != nil {
					// The call may or may not have taken effect: it can
					// linearize anywhere after its start.
					ret = 1 << 62
					mu.Lock()
					h.errors = append(h.errors, fmt.Sprintf("%s %s: %v", in.Op, in.Key, err))
					mu.Unlock()
				}
				if in.Op == opClaim && out.Claimed {
					tokens[key] = append(tokens[key], in.Token)
				}
				mu.Lock()
				h.ops = append(h.ops, porcupine.Operation{ClientId: worker, Input: in, Call: call, Output: out, Return: ret})
				h.ended = append(h.ended, failed)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return &h
}

// stopped reports whether stop is closed (never for nil).
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// callStore makes one call and translates its result.
func callStore(ctx context.Context, s retrysafe.Store, scope string, base time.Time, in storeInput) (storeOutput, error) {
	now := base.Add(time.Duration(in.Now) * time.Millisecond)
	dur := time.Duration(in.Dur) * time.Millisecond
	var (
		out storeOutput
		err error
		rec *retrysafe.Record
	)
	switch in.Op {
	case opClaim:
		var res *retrysafe.ClaimResult
		res, err = s.Claim(ctx, &retrysafe.ClaimParams{Scope: scope, Key: in.Key, Fingerprint: in.FP, Token: in.Token, Now: now, Lease: dur,
			NoTakeover: in.NoTakeover, TakeoverToken: in.TakeoverToken})
		if err == nil {
			out.Claimed, rec = res.Claimed, res.Record
		}
	case opGet:
		rec, err = s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: in.Key, Now: now})
	case opExtend:
		p := &retrysafe.ExtendParams{Scope: scope, Key: in.Key, Token: in.Token, Now: now, Lease: dur, Abandon: in.Abandon}
		if in.Checkpoint != "" {
			p.Checkpoint = &retrysafe.Checkpoint{Name: in.Checkpoint, Data: []byte(in.Checkpoint)}
		}
		err = s.Extend(ctx, p)
	case opComplete:
		err = s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: in.Key, Token: in.Token, Now: now, TTL: dur,
			Response: &retrysafe.Response{Status: 200, Header: map[string][]string{"X-Op": {in.Body}}, Body: []byte(in.Body)}})
	case opRelease:
		err = s.Release(ctx, &retrysafe.ReleaseParams{Scope: scope, Key: in.Key, Token: in.Token})
	}
	switch {
	case errors.Is(err, retrysafe.ErrLeaseLost):
		return storeOutput{Err: errLeaseLost}, nil
	case errors.Is(err, retrysafe.ErrNotFound):
		return storeOutput{Err: errNotFound}, nil
	case err != nil:
		return storeOutput{Err: errUnknown}, err
	}
	if rec != nil {
		out.Rec = view(rec, base)
	}
	return out, nil
}

// view keeps the fields of rec the contract fixes.
func view(rec *retrysafe.Record, base time.Time) recordView {
	ms := func(t time.Time) int64 { return t.Sub(base).Milliseconds() }
	v := recordView{Present: true, FP: rec.Fingerprint, State: rec.State, Token: rec.Token, Attempt: rec.Attempt, CreatedAt: ms(rec.CreatedAt), Abandoned: rec.Abandoned}
	if rec.Checkpoint != nil {
		v.Checkpoint = rec.Checkpoint.Name
	}
	switch rec.State {
	case retrysafe.StateProcessing:
		v.LeaseUntil = ms(rec.LeaseUntil)
	case retrysafe.StateCompleted:
		v.ExpiresAt = ms(rec.ExpiresAt)
		if rec.Response != nil {
			v.Status, v.Body = rec.Response.Status, string(rec.Response.Body)
			if got := strings.Join(rec.Response.Header.Values("X-Op"), ","); got != v.Body {
				v.Body += " (header X-Op=" + got + ")"
			}
		}
	}
	return v
}

// StoreResult is the verdict on a store-level history.
type StoreResult struct {
	Store      string   `json:"store"`
	Operations int      `json:"operations"`
	Result     string   `json:"result"` // porcupine's: Ok, Illegal or Unknown (timed out)
	Errors     []string `json:"errors,omitempty"`
	// Visualization is the path of porcupine's HTML view of the history,
	// written when the history is not linearizable.
	Visualization string `json:"visualization,omitempty"`
}

// Anomalies returns the store-level anomalies: an illegal history, and
// calls that failed on a healthy store.
func (r *StoreResult) Anomalies() []Anomaly {
	var as []Anomaly
	if r.Result == string(porcupine.Illegal) {
		as = append(as, Anomaly{Kind: AnomalyLinearizability, Detail: fmt.Sprintf("%s: %d operations are not linearizable; see %s", r.Store, r.Operations, r.Visualization)})
	}
	for _, e := range r.Errors {
		as = append(as, Anomaly{Kind: AnomalyStoreError, Detail: r.Store + ": " + e})
	}
	return as
}

// CheckStore checks h for linearizability against the model of the Store
// contract. When it is not linearizable and htmlPath is not empty,
// porcupine's visualization is written there.
func CheckStore(name string, h *StoreHistory, timeout time.Duration, htmlPath string) (*StoreResult, error) {
	res, info := porcupine.CheckOperationsVerbose(storeModel, h.ops, timeout)
	r := &StoreResult{Store: name, Operations: len(h.ops), Result: string(res), Errors: h.errors}
	if res == porcupine.Illegal && htmlPath != "" {
		f, err := os.Create(htmlPath)
		if err != nil {
			return r, err
		}
		if err := porcupine.Visualize(storeModel, info, f); err != nil {
			f.Close()
			return r, err
		}
		if err := f.Close(); err != nil {
			return r, err
		}
		r.Visualization = htmlPath
	}
	return r, nil
}
