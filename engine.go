package retrysafe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// engine is the state machine shared by the middleware and Do: claim or
// wait, heartbeat, complete or release. It holds no per-key state of its
// own; correctness comes from the store's atomic claim and token fencing.
type engine struct {
	cfg         *Config
	store       Store
	notifier    Notifier // nil when the store cannot notify
	nonBlocking bool     // the store says its calls never block: no StoreTimeout wrapper
	observed    bool     // an Observer was configured: time the store calls
	tracer      Tracer   // the Observer, when it is a Tracer; else nil
}

func newEngine(cfg *Config) *engine {
	n, _ := As[Notifier](cfg.Store)
	nb, _ := cfg.Store.(NonBlocking)
	_, nop := cfg.Observer.(nopObserver)
	tr, _ := cfg.Observer.(Tracer)
	return &engine{cfg: cfg, store: cfg.Store, notifier: n, nonBlocking: nb != nil && nb.NonBlocking(), observed: !nop, tracer: tr}
}

// call runs one store operation (see timed) and reports it to the Tracer
// as the step op, if there is one.
func (e *engine) call(ctx context.Context, op string, f func(ctx context.Context) error) error {
	if e.tracer == nil {
		return e.timed(ctx, op, f)
	}
	ctx, start := e.startStep(ctx, StepInfo{Step: Step(op)})
	err := e.timed(ctx, op, f)
	e.endStep(ctx, StepInfo{Step: Step(op), Err: err}, start)
	return err
}

// startStep tells the Tracer (which must not be nil) that a step starts,
// and returns the step's context and its start time.
func (e *engine) startStep(ctx context.Context, info StepInfo) (context.Context, time.Time) {
	return e.tracer.StartStep(ctx, info), time.Now()
}

// endStep tells the Tracer that the step started at start has ended.
func (e *engine) endStep(ctx context.Context, info StepInfo, start time.Time) {
	info.Duration = time.Since(start)
	e.tracer.EndStep(ctx, info)
}

// timed runs one store operation under StoreTimeout and reports it to the
// observer. A timeout of the store call itself (not of ctx) is turned into
// a storeError, so it matches ErrStoreUnavailable.
//
// The StoreTimeout context is left out when it could not change the
// outcome: for a store that never blocks ([NonBlocking]), and when ctx's
// own deadline comes first (a timeout is then ctx's, as it would be with
// the wrapper).
func (e *engine) timed(ctx context.Context, op string, f func(ctx context.Context) error) error {
	var start time.Time
	if e.observed || !e.nonBlocking {
		start = time.Now()
	}
	var err error
	if e.nonBlocking || deadlineBefore(ctx, start.Add(e.cfg.StoreTimeout)) {
		err = f(ctx)
	} else {
		cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
		err = f(cctx)
		cancel()
		if err != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
			err = &storeError{Op: op, Err: fmt.Errorf("no answer within %s: %w", e.cfg.StoreTimeout, err)}
		}
	}
	if !e.observed {
		return err
	}
	observed := err
	if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotFound) {
		observed = nil
	}
	e.cfg.Observer.StoreCall(op, time.Since(start), observed)
	return err
}

// deadlineBefore reports whether ctx has a deadline no later than t.
func deadlineBefore(ctx context.Context, t time.Time) bool {
	d, ok := ctx.Deadline()
	return ok && !d.After(t)
}

// claim claims (scope, key) for a request with fingerprint fp. Under a
// guarded policy (see guarded) it never takes an expired lease over,
// unless takeover names the token of the attempt a Resolver let re-run.
func (e *engine) claim(ctx context.Context, scope, key, fp, takeover string) (*ClaimResult, error) {
	p := &ClaimParams{
		Scope: scope, Key: key, Fingerprint: fp,
		Token: NewToken(), Now: e.cfg.Now(), Lease: e.cfg.Lease, Route: e.cfg.RouteName,
		NoTakeover: e.guarded() && takeover == "", TakeoverToken: takeover,
	}
	var res *ClaimResult
	var start time.Time
	sctx := ctx
	if e.tracer != nil {
		sctx, start = e.startStep(ctx, StepInfo{Step: StepClaim, Scope: scope, Key: key})
	}
	err := e.timed(sctx, "claim", func(ctx context.Context) error {
		var err error
		res, err = e.store.Claim(ctx, p)
		return err
	})
	if e.tracer != nil {
		info := StepInfo{Step: StepClaim, Scope: scope, Key: key, Err: err}
		if err == nil && res.Record != nil {
			info.Claimed, info.State, info.Attempt = res.Claimed, res.Record.State, res.Record.Attempt
		}
		e.endStep(sctx, info, start)
	}
	return res, err
}

func (e *engine) get(ctx context.Context, scope, key string) (*Record, error) {
	var rec *Record
	var start time.Time
	if e.tracer != nil {
		ctx, start = e.startStep(ctx, StepInfo{Step: StepGet})
	}
	err := e.timed(ctx, "get", func(ctx context.Context) error {
		var err error
		rec, err = e.store.Get(ctx, &GetParams{Scope: scope, Key: key, Now: e.cfg.Now()})
		return err
	})
	if e.tracer != nil {
		info := StepInfo{Step: StepGet, Err: err}
		if err == nil && rec != nil {
			info.State, info.Attempt = rec.State, rec.Attempt
		}
		e.endStep(ctx, info, start)
	}
	return rec, err
}

// acquire claims the record for (scope, key). It returns the caller's new
// processing record with claimed=true, or a completed record to replay with
// claimed=false. Otherwise it fails with ErrMismatch, an *InProgressError, a
// store error or the context's error. The fingerprint is compared before the
// in-flight check, so a different request always gets ErrMismatch.
//
// In wait mode a duplicate waits only for an owner that may still answer:
// a record whose outcome is unknown is refused at once, and a wait that
// sees the owner stop (its lease run out, say) ends in the same refusal. A
// waiter never takes a record over: only a request that arrives after the
// lease ran out does, so that the client that sent it learns, from the
// 409 before, that the first attempt's outcome is unknown. A record
// released during the wait (nothing ran) is claimed by the waiter.
//
// Under a guarded policy (Config.OnUnknown block, or a Resolver) a claim
// never takes an expired lease over by itself: the record comes back, and
// unknownOutcome decides (blocked, completed by the Resolver and replayed,
// or re-run: claimed again with its token as TakeoverToken, so that only
// the attempt decided about is taken over).
func (e *engine) acquire(ctx context.Context, scope, key, fp string) (rec *Record, claimed bool, err error) {
	var (
		deadline time.Time // set once this call has waited
		changed  <-chan struct{}
		takeover string // the token of the attempt a Resolver let re-run
		rounds   int    // decisions about unknown outcomes so far
	)
	for {
		res, err := e.claim(ctx, scope, key, fp, takeover)
		if err != nil {
			return nil, false, err
		}
		rec = res.Record
		if res.Claimed {
			if takeover == "" && rec.Attempt > 1 && e.guarded() {
				// The store took an expired lease over although the
				// claim said NoTakeover (one written before it existed):
				// run nothing, as the policy says. The record now holds a
				// lease of its own, which runs out like any other.
				e.cfg.Logger.ErrorContext(ctx, "retrysafe: the store ignored ClaimParams.NoTakeover and took an expired lease over; nothing ran (see store/storetest)", "attempt", rec.Attempt)
				return nil, false, e.blocked(rec)
			}
			if takeover == "" && !deadline.IsZero() && rec.Attempt > 1 {
				// Between the wait's last read (no record) and this
				// claim, another request claimed the key and its lease
				// ran out: this claim took it over. Run nothing and leave
				// the record to its new lease, as an abandoned attempt.
				return nil, false, &InProgressError{OutcomeUnknown: true, RetryAfter: e.cfg.Lease, LeaseUntil: rec.LeaseUntil, Attempt: rec.Attempt}
			}
			return rec, true, nil
		}
		if rec.Fingerprint != fp {
			return nil, false, ErrMismatch
		}
		if rec.State == StateCompleted {
			return rec, false, nil
		}
		takeover = ""
		if e.guarded() && rec.LeaseExpired(e.cfg.Now()) {
			if rounds++; rounds > resolveRounds || !deadline.IsZero() {
				// The record keeps changing under the decisions, or this
				// call waited: a waiter does not decide either.
				return nil, false, e.blocked(rec)
			}
			replay, token, err := e.unknownOutcome(ctx, rec)
			switch {
			case err != nil:
				return nil, false, err
			case replay != nil:
				return replay, false, nil
			}
			takeover = token // "" : the record changed, read it again
			continue
		}
		if ip := e.inProgress(rec); e.cfg.InFlight != InFlightWait || ip.OutcomeUnknown {
			return nil, false, ip
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(e.cfg.WaitTimeout)
			if e.notifier != nil {
				// Bounded by the wait: a store may block Subscribe (a row
				// lock held by an open CompleteTx, say) longer than that.
				subCtx, cancelSub := context.WithDeadline(ctx, deadline)
				defer cancelSub()
				ch, unsubscribe, err := e.notifier.Subscribe(subCtx, scope, key)
				if err == nil {
					defer unsubscribe()
					changed = ch
				} else {
					e.cfg.Logger.WarnContext(ctx, "retrysafe: change notification unavailable; polling", "err", err)
				}
			}
		}
		rec, err = e.tracedWait(ctx, scope, key, fp, rec, deadline, changed)
		if err != nil || rec != nil {
			return rec, false, err
		}
		// The record was released: nothing ran, claim it.
	}
}

// tracedWait is wait, reported to the Tracer as a StepWait.
func (e *engine) tracedWait(ctx context.Context, scope, key, fp string, last *Record, deadline time.Time, changed <-chan struct{}) (*Record, error) {
	if e.tracer == nil {
		return e.wait(ctx, scope, key, fp, last, deadline, changed)
	}
	ctx, start := e.startStep(ctx, StepInfo{Step: StepWait})
	rec, err := e.wait(ctx, scope, key, fp, last, deadline, changed)
	info := StepInfo{Step: StepWait, Err: err}
	if rec != nil {
		info.State, info.Attempt = rec.State, rec.Attempt
	}
	e.endStep(ctx, info, start)
	return rec, err
}

// wait re-reads the processing record last until it is completed
// (returned for replay), gone (nil, nil: claim again), of unknown outcome
// (its owner stopped renewing, or its lease ran out: an outcome-unknown
// *InProgressError), or the deadline passes (an *InProgressError about the
// last record seen).
func (e *engine) wait(ctx context.Context, scope, key, fp string, last *Record, deadline time.Time, changed <-chan struct{}) (*Record, error) {
	poll := 20 * time.Millisecond
	maxPoll := 250 * time.Millisecond
	if changed != nil {
		maxPoll = time.Second // notifications are a hint; polling is the fallback
	}
	timer := time.NewTimer(poll)
	defer timer.Stop()
	for {
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return nil, e.inProgress(last)
		}
		if poll > remaining {
			poll = remaining
		}
		timer.Reset(poll)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		case <-timer.C:
			poll = min(poll*2, maxPoll)
		}
		rec, err := e.get(ctx, scope, key)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil, nil
		case err != nil:
			return nil, err
		case rec.Fingerprint != fp:
			return nil, ErrMismatch
		case rec.State == StateCompleted:
			return rec, nil
		}
		if ip := e.inProgress(rec); ip.OutcomeUnknown {
			return nil, ip
		}
		last = rec
	}
}

// inProgress describes a processing record whose live lease blocked a
// claim. An owner that gives up marks its record abandoned
// (Record.Abandoned): its outcome is unknown at once. An owner that dies
// says nothing, but it renews its lease every Lease/3 (see heartbeat), and
// every renewal sets UpdatedAt; when more than half of the record's lease
// length (LeaseUntil - UpdatedAt) has passed since then, the owner has
// stopped renewing: its attempt ended without a result and its outcome is
// unknown. The retry is then told to come back when the lease runs out
// rather than every second. A lease that ran out says the same (a waiter
// sees it).
func (e *engine) inProgress(rec *Record) *InProgressError {
	now := e.cfg.Now()
	err := &InProgressError{RetryAfter: time.Second, LeaseUntil: rec.LeaseUntil, Attempt: rec.Attempt}
	// A store that keeps no UpdatedAt (zero) gives no evidence either way.
	lease := rec.LeaseUntil.Sub(rec.UpdatedAt)
	if stopped := !rec.UpdatedAt.IsZero() && lease > 0 && now.Sub(rec.UpdatedAt) > lease/2; stopped || rec.Abandoned || rec.LeaseExpired(now) {
		err.OutcomeUnknown = true
		err.RetryAfter = max(rec.LeaseUntil.Sub(now), time.Second)
		if e.guarded() {
			// No retry will take it over when the lease runs out: say
			// that it waits for a resolution.
			err.Blocked = true
			if rec.LeaseExpired(now) {
				err.RetryAfter = e.cfg.Lease
			}
		}
	}
	return err
}

// startHeartbeat renews rec's lease every Lease/3 until h.stop is called;
// h is the operation's (see Operation), zero until this call. A handler
// that returns within a third of the lease costs a timer and no store
// call: the first renewal runs only once it has outlived that. When the
// store says the lease is lost, it calls lose(ErrLeaseLost) once and ends.
// Renewals run on ctx, which must not be cancelled by the client (the
// operation goes on without it).
func (e *engine) startHeartbeat(h *heartbeat, ctx context.Context, rec *Record, lose context.CancelCauseFunc) {
	h.e, h.ctx, h.rec, h.lose = e, ctx, rec, lose
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timer = time.AfterFunc(e.cfg.Lease/3, h.beat)
}

// heartbeat is the state of one operation's lease renewals.
type heartbeat struct {
	e    *engine
	ctx  context.Context
	rec  *Record
	lose context.CancelCauseFunc

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	cancel  context.CancelFunc // ends the renewal in flight; nil when none
	done    chan struct{}      // closed when the renewal in flight returns
}

// beat renews the lease once and, unless stopped or lost, sets the timer
// for the next renewal.
func (h *heartbeat) beat() {
	e := h.e
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	h.cancel, h.done = cancel, done
	h.mu.Unlock()

	sctx, start := ctx, time.Time{}
	if e.tracer != nil {
		sctx, start = e.startStep(ctx, StepInfo{Step: StepExtend})
	}
	err := e.timed(sctx, "extend", func(ctx context.Context) error {
		return e.store.Extend(ctx, &ExtendParams{
			Scope: h.rec.Scope, Key: h.rec.Key, Token: h.rec.Token,
			Now: e.cfg.Now(), Lease: e.cfg.Lease,
		})
	})
	cancelled := ctx.Err() != nil
	if e.tracer != nil {
		info := StepInfo{Step: StepExtend, Err: err}
		if cancelled {
			// stop cancelled it: the operation ended, so the renewal was
			// no longer needed; that is no failure.
			info.Err = nil
		}
		e.endStep(sctx, info, start)
	}
	cancel()
	lost := errors.Is(err, ErrLeaseLost)
	switch {
	case lost:
		e.cfg.Logger.WarnContext(h.ctx, "retrysafe: lease lost while the operation ran; another claimant took it over")
		h.lose(ErrLeaseLost)
	case err != nil && !cancelled:
		e.cfg.Logger.WarnContext(h.ctx, "retrysafe: lease renewal failed; will retry", "err", err)
	}

	h.mu.Lock()
	h.cancel, h.done = nil, nil
	close(done) // after lose: stop returns only once it is done
	if !lost && !h.stopped {
		h.timer.Reset(e.cfg.Lease / 3)
	}
	h.mu.Unlock()
}

// stop ends the renewals: it stops the timer, cancels a renewal in flight
// and waits for it to return, so no renewal runs after stop.
func (h *heartbeat) stop() {
	h.mu.Lock()
	h.stopped = true
	h.timer.Stop()
	cancel, done := h.cancel, h.done
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// finishAttempts bounds how often completion is retried on store errors.
const finishAttempts = 3

// complete stores resp for the owned record. It runs on a context detached
// from the caller's cancellation (a client hang-up must not lose the
// result) and retries transient store failures a few times.
func (e *engine) complete(ctx context.Context, rec *Record, resp *Response) error {
	return e.finish(ctx, "complete", func(ctx context.Context) error {
		return e.store.Complete(ctx, &CompleteParams{
			Scope: rec.Scope, Key: rec.Key, Token: rec.Token,
			Now: e.cfg.Now(), TTL: e.cfg.TTL, Response: resp,
		})
	})
}

// release deletes the owned record so that a retry runs again.
func (e *engine) release(ctx context.Context, rec *Record) error {
	return e.finish(ctx, "release", func(ctx context.Context) error {
		return e.store.Release(ctx, &ReleaseParams{Scope: rec.Scope, Key: rec.Key, Token: rec.Token})
	})
}

// finish runs a fenced write that ends an operation, detached from ctx's
// cancellation, retrying store failures up to finishAttempts times.
func (e *engine) finish(ctx context.Context, op string, f func(ctx context.Context) error) error {
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	var err error
	for attempt := range finishAttempts {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		}
		if err = e.call(ctx, op, f); err == nil || !errors.Is(err, ErrStoreUnavailable) {
			return err
		}
	}
	return err
}
