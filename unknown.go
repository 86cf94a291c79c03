package retrysafe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// Unknown outcomes: what the engine does with a processing record whose
// lease ran out (its owner crashed, or abandoned the attempt) when a retry
// of the same request finds it, under [Config].OnUnknown and
// [Config].Resolver, and the completer that resolves such records without
// a retry.

// Resolver decides about an attempt whose outcome is unknown: rec is the
// processing record (read-only) whose lease ran out, with its Attempt, its
// last Checkpoint and whether its owner abandoned it. A Resolver typically
// asks the system the operation acted on ("did charge ch_1 happen?").
//
// It runs with a context bounded by Config.ResolveTimeout. An error, a
// panic, or no answer in time keeps the record blocked (409
// outcome-unknown): nothing is lost, and the next retry or completer pass
// asks again. It may be called for one record by several retries at once;
// the store's fencing lets only one decision take effect.
type Resolver func(ctx context.Context, rec *Record) (Resolution, error)

// ResolutionAction is what a [Resolution] decides.
type ResolutionAction int

const (
	// ResolveKeepBlocked leaves the record as it is: retries get 409
	// outcome-unknown. The zero value.
	ResolveKeepBlocked ResolutionAction = iota
	// ResolveRerun runs the operation again: the retry takes the record
	// over (Attempt+1, the checkpoint kept) if nobody else did meanwhile.
	// From the completer ([Executor.ResolveStranded]) it marks the record
	// resolved not done ([Record.ResolvedNotDone]) for the next retry to
	// take over the same way.
	ResolveRerun
	// ResolveComplete stores Resolution.Response as the operation's result
	// (fenced by the record's token), and every retry gets it.
	ResolveComplete
)

// Resolution is a [Resolver]'s decision. The zero value keeps the record
// blocked.
type Resolution struct {
	Action ResolutionAction
	// Response is the result to store with ResolveComplete (for HTTP the
	// answer the first attempt would have given; for Do the encoded
	// result, see [ResultResponse]). Its headers are filtered by
	// Config.StoreHeader like a handler's.
	Response *Response
}

// guarded reports whether a retry may not take an expired lease over on
// its own: the policy blocks, or a Resolver decides.
func (e *engine) guarded() bool {
	return e.cfg.Resolver != nil || e.cfg.OnUnknown == OnUnknownBlock
}

// blocked is the refusal of a retry that found rec, an attempt whose
// outcome is unknown that the policy does not take over.
func (e *engine) blocked(rec *Record) *InProgressError {
	return &InProgressError{OutcomeUnknown: true, Blocked: true, RetryAfter: e.cfg.Lease, LeaseUntil: rec.LeaseUntil, Attempt: rec.Attempt}
}

// errResolverPanicked and errResolverTimeout are what a Resolver that
// panicked or did not answer in time is reported as.
var (
	errResolverPanicked = errors.New("retrysafe: the Resolver panicked")
	errResolverTimeout  = errors.New("retrysafe: the Resolver did not answer within Config.ResolveTimeout")
)

// resolve asks the Resolver about rec, bounded by ResolveTimeout. It runs
// the Resolver on its own goroutine, so that one which ignores its
// context cannot hold the request (its late answer is dropped), and
// recovers its panic. Any failure is returned as an error: keep blocked.
// The Resolver reads the checkpoint the attempt stands on, never a
// not-done mark (see unmarked).
func (e *engine) resolve(ctx context.Context, rec *Record) (Resolution, error) {
	rec = unmarkedRecord(rec)
	ctx, cancel := context.WithTimeout(ctx, e.cfg.ResolveTimeout)
	defer cancel()
	type answer struct {
		res Resolution
		err error
	}
	done := make(chan answer, 1) // the goroutine never blocks on a late answer
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- answer{err: fmt.Errorf("%w: %v", errResolverPanicked, v)}
			}
		}()
		res, err := e.cfg.Resolver(ctx, rec)
		done <- answer{res, err}
	}()
	select {
	case a := <-done:
		if a.err == nil && a.res.Action == ResolveComplete && a.res.Response == nil {
			a.err = errors.New("retrysafe: the Resolver answered ResolveComplete without a Response")
		}
		if a.err == nil && (a.res.Action < ResolveKeepBlocked || a.res.Action > ResolveComplete) {
			a.err = fmt.Errorf("retrysafe: the Resolver answered an unknown action %d", a.res.Action)
		}
		return a.res, a.err
	case <-ctx.Done():
		return Resolution{}, errResolverTimeout
	}
}

// resolved is the response a Resolver decided to store, with the headers
// Config.StoreHeader keeps.
func (e *engine) resolved(resp *Response) *Response {
	c := &Response{Status: resp.Status, Header: make(http.Header, len(resp.Header)), Body: resp.Body}
	for k, v := range resp.Header {
		if e.cfg.StoreHeader(k) {
			c.Header[k] = v
		}
	}
	return c
}

// unknownOutcome decides, for a retry under a guarded policy, about rec: a
// processing record of the same request whose lease ran out. It returns
// the completed record to replay (the Resolver completed it), or a token
// to claim with as TakeoverToken (the Resolver let the attempt re-run), or
// neither and no error when the record changed under the decision (read it
// again), or the refusal. A record the completer resolved not done is
// decided: it is taken over, under either policy, without asking again.
func (e *engine) unknownOutcome(ctx context.Context, rec *Record) (replay *Record, takeover string, err error) {
	if rec.ResolvedNotDone() {
		return nil, rec.Token, nil
	}
	if e.cfg.Resolver == nil {
		return nil, "", e.blocked(rec)
	}
	res, err := e.resolve(ctx, rec)
	if err != nil {
		e.cfg.Logger.WarnContext(ctx, "retrysafe: the Resolver gave no decision; the record stays blocked", "attempt", rec.Attempt, "err", err)
		return nil, "", e.blocked(rec)
	}
	switch res.Action {
	case ResolveRerun:
		return nil, rec.Token, nil
	case ResolveComplete:
		resp := e.resolved(res.Response)
		err := e.complete(ctx, rec, resp)
		switch {
		case errors.Is(err, ErrLeaseLost):
			return nil, "", nil // completed, released or taken over meanwhile
		case err != nil:
			// Not a store error for the caller: with FailOpen that would
			// run the operation the Resolver found done.
			e.cfg.Logger.ErrorContext(ctx, "retrysafe: storing the Resolver's response failed; the record stays blocked", "err", err)
			return nil, "", e.blocked(rec)
		}
		done := rec.Clone()
		done.State, done.Response, done.Abandoned = StateCompleted, resp, false
		return done, "", nil
	}
	return nil, "", e.blocked(rec)
}

// Stranded counts what a [Executor.ResolveStranded] pass did; each
// record it looked at is counted once.
type Stranded struct {
	// Completed records got the Resolver's response (ResolveComplete).
	// AwaitingRetry ones were found not done (ResolveRerun) and marked so
	// at their attempt ([Record.ResolvedNotDone]): they stay processing
	// until a retry takes them over as the next attempt. Blocked ones stay
	// as they were (the Resolver kept them blocked, failed, or gave no
	// answer in time, or writing the decision failed).
	Completed, AwaitingRetry, Blocked int
	// Skipped records were not stranded (nil, not processing, their lease
	// still live, or resolved not done already), or changed before the
	// decision was written (another process completed, released or took
	// them over).
	Skipped int
}

// ResolveStranded is the completer: it asks the Resolver about each of
// recs that is stranded (a processing record whose lease ran out at
// Config.Now, not resolved not done already), and writes its decision
// fenced by the record's own token: ResolveComplete completes it with the
// response; ResolveRerun marks it resolved not done at its attempt
// ([Record.ResolvedNotDone]: a checkpoint that keeps the attempt's own,
// written with Abandon, the expired lease left as it is), so the next
// retry takes it over as the next attempt and runs the operation without
// asking again; ResolveKeepBlocked leaves it. So a record that changed
// since it was listed is never overwritten. (One listed before another
// pass marked it is asked about again: the token is the same, and the
// same answer writes the same mark.)
//
// ResolveRerun does not release the record: a released key's next claim
// would start again at Attempt 1, and a downstream that, having been told
// attempt N did not happen, refuses attempts up to N of the key (the
// fence of docs/gateway.md) would refuse it and every retry after it. A
// marked record no retry comes back for stays until a sweep retires it
// (the store's sweeper, admin.SweepParams.ProcessingRetention after its
// lease's end).
//
// recs are records as the store returns them, with the callers' scopes:
// list them with the store's Admin (ListParams.LeaseExpiredBy and Route
// select this Config's stranded records), and call this from a
// background loop (the gateway's sweeper). The error is the first store
// failure; the pass goes on past it, and ctx ends it early. It needs
// Config.Resolver.
func (x *Executor) ResolveStranded(ctx context.Context, recs []*Record) (Stranded, error) {
	return x.e.resolveStranded(ctx, recs)
}

// ResolveStranded is [Executor.ResolveStranded] for the records of [Do]
// calls, under the Doer's DoConfig.Resolver.
func (d *Doer) ResolveStranded(ctx context.Context, recs []*Record) (Stranded, error) {
	return d.e.resolveStranded(ctx, recs)
}

func (e *engine) resolveStranded(ctx context.Context, recs []*Record) (Stranded, error) {
	var n Stranded
	if e.cfg.Resolver == nil {
		return n, errors.New("retrysafe: ResolveStranded needs a Config.Resolver")
	}
	var first error
	for _, rec := range recs {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		if rec == nil || !rec.LeaseExpired(e.cfg.Now()) || rec.ResolvedNotDone() {
			n.Skipped++
			continue
		}
		res, err := e.resolve(ctx, rec)
		if err != nil {
			e.cfg.Logger.WarnContext(ctx, "retrysafe: the Resolver gave no decision for a stranded record; it stays blocked", "attempt", rec.Attempt, "err", err)
			n.Blocked++
			continue
		}
		switch res.Action {
		case ResolveComplete:
			err = e.complete(ctx, rec, e.resolved(res.Response))
		case ResolveRerun:
			err = e.abandon(ctx, rec, notDoneMark(rec))
		default:
			n.Blocked++
			continue
		}
		switch {
		case errors.Is(err, ErrLeaseLost):
			n.Skipped++
		case err != nil:
			n.Blocked++
			if first == nil {
				first = err
			}
		case res.Action == ResolveComplete:
			n.Completed++
		default:
			n.AwaitingRetry++
		}
	}
	return n, first
}

// abandon marks rec's attempt abandoned in the store (its outcome is
// unknown from now on), fenced by its token, leaving its lease as it is.
// The Lease it passes is ignored by a store that knows Abandon; one that
// does not (written before it existed) takes the call for a renewal, and a
// zero Lease would end the lease at once, letting the next retry run the
// operation again: with the configured lease, it is held as a heartbeat
// would hold it.
func (e *engine) abandon(ctx context.Context, rec *Record, note *Checkpoint) error {
	return e.finish(ctx, "extend", func(ctx context.Context) error {
		return e.store.Extend(ctx, &ExtendParams{Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Now: e.cfg.Now(), Lease: e.cfg.Lease, Abandon: true, Checkpoint: note})
	})
}

// resolveRounds bounds how often one retry decides about records that
// change under it (each round a claim and, with a Resolver, one call).
const resolveRounds = 3
