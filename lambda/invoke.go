package retrysafelambda

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/retrysafe/retrysafe"
)

// run runs fn at most once for key within scope, as retrysafe.Run does,
// for one invocation: its lease is bounded by ctx's deadline (see
// invocationStore), a result in the local cache answers without a store
// call, and fn's error follows Config.Permanent. replayed reports that fn
// did not run and out is a stored result.
func run[Out any](ctx context.Context, w *wrapper, scope, key, fp string, fn func(context.Context) (Out, error)) (out Out, replayed bool, err error) {
	c := &w.cfg
	now := c.Now()
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline && !deadline.After(now) {
		// Lambda stops the function any moment now (a deadline of zero
		// remaining time included): claiming would leave a record that
		// only its lease frees, for work that cannot run.
		return out, false, ErrNoTimeLeft
	}
	if w.cache != nil {
		if e, ok := w.cache.get(scope, key, now); ok {
			if e.fingerprint != fp {
				return out, false, retrysafe.ErrMismatch
			}
			if err := json.Unmarshal(e.body, &out); err == nil {
				if c.Observer != nil {
					c.Observer.Outcome(retrysafe.OutcomeReplayed, c.Now().Sub(now))
				}
				return out, true, nil
			}
			var zero Out
			out = zero // a result that does not decode as Out: ask the store
		}
	}

	lease, wait := c.Lease, c.WaitTimeout
	inv := &invocationStore{Store: c.Store, fingerprint: fp}
	if hasDeadline {
		remaining := deadline.Sub(now)
		// Wall clock only: stores add a lease to ClaimParams.Now as wall
		// time, so a limit kept on the monotonic clock could be overshot
		// by their drift.
		inv.limit = deadline.Round(0).Add(c.DeadlineGrace)
		lease = min(lease, remaining+c.DeadlineGrace)
		wait = max(min(wait, remaining/2), time.Millisecond)
	}
	d, err := retrysafe.NewDoer(c.doConfig(inv, scope, lease, wait))
	if err != nil {
		return out, false, fmt.Errorf("retrysafe/lambda: %w", err)
	}
	ran := false
	var fnErr error
	out, err = retrysafe.Run(ctx, d, key, fp, func(ctx context.Context) (Out, error) {
		ran = true
		v, err := fn(ctx)
		fnErr = err
		switch {
		case err == nil:
		case ctx.Err() != nil:
			// The invocation ran out of time (or was cancelled) and the
			// handler gave up: whatever it had started may or may not
			// have happened. The record is left to its lease, which ends
			// at the deadline plus the grace, and then to OnUnknown.
			if op := retrysafe.OperationFromContext(ctx); op != nil {
				op.Abandon()
			}
		case c.Permanent(err) && !retrysafe.IsPermanent(err):
			err = retrysafe.Permanent(err)
		}
		return v, err
	})
	if ran && fnErr == nil && errors.Is(err, retrysafe.ErrResultNotStored) {
		// The handler ran and succeeded, but its result could not be
		// stored. Failing the invocation would make Lambda retry it, and
		// the retry would run the handler again once the lease ends: the
		// result is the answer, and the operator is told.
		c.Logger.ErrorContext(ctx, "retrysafe/lambda: the handler ran but its result was not stored; a duplicate after the lease may run it again", "err", err)
		return out, false, nil
	}
	if err == nil && w.cache != nil {
		if e, ok := inv.result(); ok && e.fingerprint == fp && len(e.body) <= MaxCachedResult {
			w.cache.put(scope, key, e)
		}
	}
	return out, !ran && err == nil, err
}

// invocationStore is the store as one invocation sees it: every lease it
// claims or renews ends by limit (the invocation's deadline plus
// Config.DeadlineGrace), so that an invocation Lambda stopped at its
// timeout holds its key no longer than that, whatever its lease length
// and however recently it renewed. (Lambda stops a function at its
// deadline: its heartbeat stops with it, and no later renewal reaches
// the store.) It also notes the completed record the invocation saw or
// wrote, for the local cache. A Store wrapper: retrysafe.As finds the
// abilities of the store below through Unwrap.
type invocationStore struct {
	retrysafe.Store
	limit       time.Time // zero: no deadline
	fingerprint string    // the invocation's

	mu   sync.Mutex
	seen cacheEntry
	has  bool
}

// Unwrap returns the store below.
func (s *invocationStore) Unwrap() retrysafe.Store { return s.Store }

// NonBlocking forwards the store's own answer.
func (s *invocationStore) NonBlocking() bool {
	nb, ok := s.Store.(retrysafe.NonBlocking)
	return ok && nb.NonBlocking()
}

// leaseAt bounds a lease that starts at now by s.limit; ok is false past
// the limit (an owner that outlived its deadline, which Lambda does not
// let happen), when there is no lease left to give.
func (s *invocationStore) leaseAt(now time.Time, lease time.Duration) (time.Duration, bool) {
	if s.limit.IsZero() {
		return lease, true
	}
	left := s.limit.Sub(now.Round(0))
	return min(lease, left), left > 0
}

// Claim claims with the lease bounded by the deadline.
func (s *invocationStore) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	q := *p
	var ok bool
	if q.Lease, ok = s.leaseAt(p.Now, p.Lease); !ok {
		return nil, ErrNoTimeLeft
	}
	res, err := s.Store.Claim(ctx, &q)
	if err == nil && !res.Claimed {
		s.note(res.Record)
	}
	return res, err
}

// Extend renews with the lease bounded by the deadline. Past it, a plain
// renewal is not sent (the record's lease stays at the limit, and a
// retry may take the record over), and a checkpoint is written with a
// lease of a millisecond. Abandon leaves the lease as it is.
func (s *invocationStore) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	if p.Abandon {
		return s.Store.Extend(ctx, p)
	}
	q := *p
	var ok bool
	if q.Lease, ok = s.leaseAt(p.Now, p.Lease); !ok {
		if p.Checkpoint == nil {
			return nil
		}
		q.Lease = time.Millisecond
	}
	return s.Store.Extend(ctx, &q)
}

// Get notes a completed record it returns.
func (s *invocationStore) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	rec, err := s.Store.Get(ctx, p)
	if err == nil {
		s.note(rec)
	}
	return rec, err
}

// Complete notes the result it stored.
func (s *invocationStore) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	err := s.Store.Complete(ctx, p)
	if err == nil && p.Response != nil {
		s.mu.Lock()
		s.seen = cacheEntry{fingerprint: s.fingerprint, body: p.Response.Body, expires: p.Now.Add(p.TTL)}
		s.has = true
		s.mu.Unlock()
	}
	return err
}

func (s *invocationStore) note(rec *retrysafe.Record) {
	if rec == nil || rec.State != retrysafe.StateCompleted || rec.Response == nil {
		return
	}
	s.mu.Lock()
	s.seen = cacheEntry{fingerprint: rec.Fingerprint, body: rec.Response.Body, expires: rec.ExpiresAt}
	s.has = true
	s.mu.Unlock()
}

// result returns the completed record the invocation ended with.
func (s *invocationStore) result() (cacheEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen, s.has
}

// Compile-time guard.
var _ retrysafe.Store = (*invocationStore)(nil)
