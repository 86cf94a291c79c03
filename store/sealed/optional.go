package sealed

import (
	"context"

	"github.com/retrysafe/retrysafe"
)

// The optional abilities the wrapper must change: Notifier, whose scope
// is the stored one, and Admin, whose records it opens. Every other
// ability of the inner store (Pinger, ReadyChecker, Sweeper, Batcher)
// touches no record and is found through Unwrap by [retrysafe.As].
//
// Each changed ability is a layer over the *store, present only when the
// inner store has that ability, so the wrapper has exactly the abilities
// of what it wraps.
type (
	notifierLayer struct {
		retrysafe.Store // the layer below
		s               *store
		n               retrysafe.Notifier
	}
	adminLayer struct {
		retrysafe.Store // the layer below
		s               *store
		a               retrysafe.Admin
	}
)

var (
	_ retrysafe.Notifier = (*notifierLayer)(nil)
	_ retrysafe.Admin    = (*adminLayer)(nil)
)

// withOptional returns s with the layers of the abilities of s.inner that
// the wrapper changes.
func (s *store) withOptional() retrysafe.Store {
	var out retrysafe.Store = s
	if n, ok := retrysafe.As[retrysafe.Notifier](s.inner); ok {
		out = &notifierLayer{Store: out, s: s, n: n}
	}
	if a, ok := retrysafe.As[retrysafe.Admin](s.inner); ok {
		out = &adminLayer{Store: out, s: s, a: a}
	}
	return out
}

// Unwrap returns the layer below, so that [retrysafe.As] finds the other
// abilities.
func (l *notifierLayer) Unwrap() retrysafe.Store { return l.Store }

// Subscribe subscribes through the inner store, under the stored scope.
func (l *notifierLayer) Subscribe(ctx context.Context, scope, key string) (<-chan struct{}, func(), error) {
	return l.n.Subscribe(ctx, l.s.scope(scope), key)
}

// Unwrap returns the layer below, so that [retrysafe.As] finds the other
// abilities.
func (l *adminLayer) Unwrap() retrysafe.Store { return l.Store }

// Admin's methods take and return scopes as the inner store keeps them:
// with a ring, the HMAC of [KeyRing.Scope], which is what operators see;
// fingerprints are shown as stored.

// StoredScope returns the scope under which the inner store keeps the
// records of scope (with a ring [KeyRing.Scope], without one scope
// itself), for an operator who looks a caller up by its credential (the
// operator page's identity filter).
func (l *adminLayer) StoredScope(scope string) string { return l.s.scope(scope) }

// List lists through the inner store and opens each record's response it
// can. Sealed headers can only be opened with the body, so with a key ring
// List always reads bodies and drops them afterwards when p.WithBodies is
// false. A response it cannot open (key not in the ring, altered) is left
// as stored; [KeyID] tells that it is sealed when its body is listed.
func (l *adminLayer) List(ctx context.Context, p *retrysafe.ListParams) ([]*retrysafe.Record, error) {
	q := *p
	q.WithBodies = p.WithBodies || l.s.ring != nil
	recs, err := l.a.List(ctx, &q)
	if err != nil {
		return nil, err
	}
	l.openAll(recs, p.WithBodies)
	return recs, nil
}

// Find finds through the inner store and opens each record's response it
// can, as List does.
func (l *adminLayer) Find(ctx context.Context, p *retrysafe.FindParams) ([]*retrysafe.Record, error) {
	q := *p
	q.WithBodies = p.WithBodies || l.s.ring != nil
	recs, err := l.a.Find(ctx, &q)
	if err != nil {
		return nil, err
	}
	l.openAll(recs, p.WithBodies)
	return recs, nil
}

// openAll opens the responses of recs that it can, and drops their bodies
// unless withBodies.
func (l *adminLayer) openAll(recs []*retrysafe.Record, withBodies bool) {
	// Records a store returns are read-only: each changed one is a copy.
	for i, rec := range recs {
		if rec.Response == nil && rec.Checkpoint == nil {
			continue
		}
		c := l.checkpointOpened(rec)
		if rec.Response != nil {
			if resp, err := l.s.open(rec.Scope, rec.Key, rec.Response); err == nil {
				c.Response = resp
			}
			if !withBodies {
				resp := *c.Response
				resp.Body = nil
				c.Response = &resp
			}
		}
		recs[i] = c
	}
}

// checkpointOpened returns a copy of rec with its checkpoint opened, or
// left as stored when it cannot be opened.
func (l *adminLayer) checkpointOpened(rec *retrysafe.Record) *retrysafe.Record {
	c := *rec
	if cp, err := l.s.openCheckpoint(rec.Scope, rec.Key, rec.Checkpoint); err == nil {
		c.Checkpoint = cp
	}
	return &c
}

// Stats is the inner store's Stats, with the checkpoints of its records
// (processing ones, which hold no response) opened.
func (l *adminLayer) Stats(ctx context.Context, p *retrysafe.StatsParams) (*retrysafe.Stats, error) {
	st, err := l.a.Stats(ctx, p)
	if err != nil || st == nil {
		return st, err
	}
	c := *st
	if st.OldestInFlight != nil {
		c.OldestInFlight = l.checkpointOpened(st.OldestInFlight)
	}
	c.Unknown = make([]*retrysafe.Record, len(st.Unknown))
	for i, rec := range st.Unknown {
		c.Unknown[i] = l.checkpointOpened(rec)
	}
	return &c, nil
}

// Delete is the inner store's Delete.
func (l *adminLayer) Delete(ctx context.Context, scope, key string) error {
	return l.a.Delete(ctx, scope, key)
}
