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
	nonBlocking bool     // the store says its calls never block
	observed    bool     // an Observer was configured: time the store calls
	tracer      Tracer   // the Observer, when it is a Tracer; else nil
	// copiesResponse: the store copies CompleteParams.Response in
	// Complete (see responseCopier).
	copiesResponse bool

	beats *heartbeats // the queue of lease renewals, shared by every engine with this Lease
}

func newEngine(cfg *Config) *engine {
	n, _ := As[Notifier](cfg.Store)
	nb, _ := cfg.Store.(NonBlocking)
	_, nop := cfg.Observer.(nopObserver)
	tr, _ := cfg.Observer.(Tracer)
	rc, _ := cfg.Store.(responseCopier)
	return &engine{cfg: cfg, store: cfg.Store, notifier: n, nonBlocking: nb != nil && nb.NonBlocking(), observed: !nop,
		tracer: tr, copiesResponse: rc != nil && rc.CopiesResponse() == cfg.Store, beats: heartbeatQueue(cfg.Lease / 3)}
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
// a StoreError, so it matches ErrStoreUnavailable.
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
			err = &StoreError{Op: op, Err: fmt.Errorf("no answer within %s: %w", e.cfg.StoreTimeout, err)}
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

// claimParams and completeParams recycle the params of calls to
// NonBlocking stores, which keep no params once a call returns (see
// [NonBlocking]). Other stores get new params every call: one may still
// hold them after a call that timed out.
var (
	claimParams    = sync.Pool{New: func() any { return new(ClaimParams) }}
	completeParams = sync.Pool{New: func() any { return new(CompleteParams) }}
)

func (e *engine) claim(ctx context.Context, scope, key, fp string) (*ClaimResult, error) {
	var res *ClaimResult
	// The owner token comes from a pooled batch, which takes it back if
	// the claim does not win (see tokenBatch.spare). Around a call to a
	// NonBlocking store the batch is held, so taking the token back costs
	// no second trip to the pool; a call that may block puts it back
	// first, so that concurrent claims share batches.
	tb := tokenBatches.Get().(*tokenBatch)
	token := tb.take()
	var p *ClaimParams
	if e.nonBlocking {
		p = claimParams.Get().(*ClaimParams)
	} else {
		tokenBatches.Put(tb)
		tb = nil
		p = new(ClaimParams)
	}
	*p = ClaimParams{
		Scope: scope, Key: key, Fingerprint: fp,
		Token: token, Now: e.cfg.Now(), Lease: e.cfg.Lease, Route: e.cfg.RouteName,
	}
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
	if e.nonBlocking {
		*p = ClaimParams{}
		claimParams.Put(p)
	}
	if err == nil && !res.Claimed {
		if tb == nil {
			tb = tokenBatches.Get().(*tokenBatch)
		}
		tb.spare = token
	}
	if tb != nil {
		tokenBatches.Put(tb)
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
func (e *engine) acquire(ctx context.Context, scope, key, fp string) (rec *Record, claimed bool, err error) {
	var (
		deadline time.Time // set once this call has waited
		changed  <-chan struct{}
	)
	for {
		res, err := e.claim(ctx, scope, key, fp)
		if err != nil {
			return nil, false, err
		}
		rec = res.Record
		if res.Claimed {
			if !deadline.IsZero() && rec.Attempt > 1 {
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
// claim. An owner renews its lease every Lease/3 (see heartbeat), and every
// renewal sets UpdatedAt; when more than half of the record's lease length
// (LeaseUntil - UpdatedAt) has passed since then, the owner has stopped
// renewing: its attempt ended without a result and its outcome is unknown.
// The retry is then told to come back when the lease runs out rather than
// every second. A lease that ran out says the same (a waiter sees it).
func (e *engine) inProgress(rec *Record) *InProgressError {
	now := e.cfg.Now()
	err := &InProgressError{RetryAfter: time.Second, LeaseUntil: rec.LeaseUntil, Attempt: rec.Attempt}
	// A store that keeps no UpdatedAt (zero) gives no evidence either way.
	lease := rec.LeaseUntil.Sub(rec.UpdatedAt)
	if stopped := !rec.UpdatedAt.IsZero() && lease > 0 && now.Sub(rec.UpdatedAt) > lease/2; stopped || rec.LeaseExpired(now) {
		err.OutcomeUnknown = true
		err.RetryAfter = max(rec.LeaseUntil.Sub(now), time.Second)
	}
	return err
}

// heartbeat renews the lease every Lease/3 until stop is called. When the
// store says the lease is lost, it calls lose(ErrLeaseLost) once and ends.
//
// No goroutine or timer is made per operation: the heartbeat loop for
// the engine's Lease (see heartbeats) starts a renewal only for one that
// outlives a third of the lease, so a handler that returns sooner costs
// two short critical sections.
func (e *engine) heartbeat(ctx context.Context, rec *Record, lose context.CancelCauseFunc) (stop func()) {
	h := &heartbeat{}
	e.startHeartbeat(h, ctx, rec, lose)
	return h.stop
}

// startHeartbeat starts h (a zero heartbeat, which the caller may embed
// in a larger allocation); h.stop ends it.
func (e *engine) startHeartbeat(h *heartbeat, ctx context.Context, rec *Record, lose context.CancelCauseFunc) {
	h.e, h.ctx, h.rec, h.lose = e, ctx, rec, lose
	s := e.beats
	s.mu.Lock()
	s.scheduleLocked(h)
	s.mu.Unlock()
}

// heartbeats is a queue of the operations whose next lease renewal is
// due, and the one goroutine that starts those renewals. Every engine
// whose Lease gives the same period shares one (see heartbeatQueue): DoWith
// makes an engine per call, and one queue per engine would start a
// goroutine per call.
//
// Every renewal is due period after it is queued, the same for all, and
// it is queued at the time read under mu: so the queue is in order of due
// time by construction, a linked list with the earliest first, appended
// at the tail and unlinked anywhere in O(1), without a heap.
//
// The loop sleeps until the head is due. A heartbeat queued later is due
// later, so nothing needs to wake the loop early; it exits when it wakes
// to an empty queue and the next scheduleLocked starts it again. Each due
// renewal runs on a goroutine of its own (a slow store delays no other
// renewal) and, when it is done, queues its heartbeat again.
type heartbeats struct {
	period time.Duration // Lease/3

	mu         sync.Mutex
	head, tail *heartbeat
	running    bool // the loop goroutine is running
}

var (
	heartbeatQueuesMu sync.Mutex
	heartbeatQueues   = map[time.Duration]*heartbeats{}
)

// heartbeatQueue returns the process's queue for renewals every period.
// Queues are kept for the life of the process, one per period in use (a
// few bytes each; an idle queue has no goroutine).
func heartbeatQueue(period time.Duration) *heartbeats {
	heartbeatQueuesMu.Lock()
	defer heartbeatQueuesMu.Unlock()
	q := heartbeatQueues[period]
	if q == nil {
		q = &heartbeats{period: period}
		heartbeatQueues[period] = q
	}
	return q
}

// scheduleLocked queues h's next renewal a period from now and starts the
// loop if it is not running.
func (s *heartbeats) scheduleLocked(h *heartbeat) {
	h.due = time.Now().Add(s.period)
	h.prev, h.next, h.queued = s.tail, nil, true
	if s.tail != nil {
		s.tail.next = h
	} else {
		s.head = h
	}
	s.tail = h
	if !s.running {
		s.running = true
		go s.loop()
	}
}

// removeLocked unlinks a queued h.
func (s *heartbeats) removeLocked(h *heartbeat) {
	if h.prev != nil {
		h.prev.next = h.next
	} else {
		s.head = h.next
	}
	if h.next != nil {
		h.next.prev = h.prev
	} else {
		s.tail = h.prev
	}
	h.prev, h.next, h.queued = nil, nil, false
}

// loop starts the renewals as they fall due, until the queue is empty.
func (s *heartbeats) loop() {
	var timer *time.Timer
	for {
		s.mu.Lock()
		now := time.Now()
		for h := s.head; h != nil && !now.Before(h.due); h = s.head {
			s.removeLocked(h)
			go h.beat()
		}
		if s.head == nil {
			s.running = false
			s.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			return
		}
		wait := s.head.due.Sub(now)
		s.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		<-timer.C
	}
}

// heartbeat is the state of one operation's lease renewals. The fields
// after lose are guarded by e.beats.mu.
type heartbeat struct {
	e    *engine
	ctx  context.Context
	rec  *Record
	lose context.CancelCauseFunc

	due        time.Time // when the next renewal starts, while queued
	prev, next *heartbeat
	queued     bool
	stopped    bool
	cancel     context.CancelFunc // ends the renewal in flight; nil when none
	done       chan struct{}      // closed when the renewal in flight returns
}

// beat renews the lease once and, unless stopped or lost, queues the next
// renewal.
func (h *heartbeat) beat() {
	e := h.e
	s := e.beats
	s.mu.Lock()
	if h.stopped {
		s.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	h.cancel, h.done = cancel, done
	s.mu.Unlock()

	err := e.call(ctx, "extend", func(ctx context.Context) error {
		return e.store.Extend(ctx, &ExtendParams{
			Scope: h.rec.Scope, Key: h.rec.Key, Token: h.rec.Token,
			Now: e.cfg.Now(), Lease: e.cfg.Lease,
		})
	})
	cancelled := ctx.Err() != nil
	cancel()
	lost := errors.Is(err, ErrLeaseLost)
	switch {
	case lost:
		e.cfg.Logger.WarnContext(h.ctx, "retrysafe: lease lost while the operation ran; another claimant took it over")
		h.lose(ErrLeaseLost)
	case err != nil && !cancelled:
		e.cfg.Logger.WarnContext(h.ctx, "retrysafe: lease renewal failed; will retry", "err", err)
	}

	s.mu.Lock()
	h.cancel, h.done = nil, nil
	close(done) // after lose: stop returns only once it is done
	if !lost && !h.stopped {
		s.scheduleLocked(h)
	}
	s.mu.Unlock()
}

// stop ends the renewals: it takes the next one off the queue, cancels a
// renewal in flight and waits for it to return, so no renewal runs after
// stop.
func (h *heartbeat) stop() {
	s := h.e.beats
	s.mu.Lock()
	h.stopped = true
	if h.queued {
		s.removeLocked(h)
	}
	cancel, done := h.cancel, h.done
	s.mu.Unlock()
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
	if !e.nonBlocking {
		return e.finish(ctx, "complete", func(ctx context.Context) error {
			return e.store.Complete(ctx, &CompleteParams{
				Scope: rec.Scope, Key: rec.Key, Token: rec.Token,
				Now: e.cfg.Now(), TTL: e.cfg.TTL, Response: resp,
			})
		})
	}
	p := completeParams.Get().(*CompleteParams)
	err := e.finish(ctx, "complete", func(ctx context.Context) error {
		*p = CompleteParams{
			Scope: rec.Scope, Key: rec.Key, Token: rec.Token,
			Now: e.cfg.Now(), TTL: e.cfg.TTL, Response: resp,
		}
		return e.store.Complete(ctx, p)
	})
	*p = CompleteParams{}
	completeParams.Put(p)
	return err
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
