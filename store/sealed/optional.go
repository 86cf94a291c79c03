package sealed

import (
	"context"

	"github.com/retrysafe/retrysafe"
)

// The optional abilities, each forwarded to the inner store. withOptional
// embeds those the inner store has next to *store, so the wrapper
// implements exactly the optional interfaces of what it wraps.
type (
	pinger   struct{ p retrysafe.Pinger }
	sweeper  struct{ sw retrysafe.Sweeper }
	notifier struct{ n retrysafe.Notifier }
	admin    struct {
		s *store
		a retrysafe.Admin
	}
)

var (
	_ retrysafe.Pinger   = pinger{}
	_ retrysafe.Sweeper  = sweeper{}
	_ retrysafe.Notifier = notifier{}
	_ retrysafe.Admin    = admin{}
)

// Ping is the inner store's Ping.
func (f pinger) Ping(ctx context.Context) error { return f.p.Ping(ctx) }

// Sweep is the inner store's Sweep.
func (f sweeper) Sweep(ctx context.Context, p *retrysafe.SweepParams) (int, error) {
	return f.sw.Sweep(ctx, p)
}

// Subscribe is the inner store's Subscribe.
func (f notifier) Subscribe(ctx context.Context, scope, key string) (<-chan struct{}, func(), error) {
	return f.n.Subscribe(ctx, scope, key)
}

// List lists through the inner store and opens each record's response it
// can. Sealed headers can only be opened with the body, so with a key ring
// List always reads bodies and drops them afterwards when p.WithBodies is
// false. A response it cannot open (key not in the ring, altered) is left
// as stored; [KeyID] tells that it is sealed when its body is listed.
func (f admin) List(ctx context.Context, p *retrysafe.ListParams) ([]*retrysafe.Record, error) {
	q := *p
	q.WithBodies = p.WithBodies || f.s.ring != nil
	recs, err := f.a.List(ctx, &q)
	if err != nil {
		return nil, err
	}
	f.openAll(recs, p.WithBodies)
	return recs, nil
}

// Find finds through the inner store and opens each record's response it
// can, as List does.
func (f admin) Find(ctx context.Context, p *retrysafe.FindParams) ([]*retrysafe.Record, error) {
	q := *p
	q.WithBodies = p.WithBodies || f.s.ring != nil
	recs, err := f.a.Find(ctx, &q)
	if err != nil {
		return nil, err
	}
	f.openAll(recs, p.WithBodies)
	return recs, nil
}

// openAll opens the responses of recs that it can, and drops their bodies
// unless withBodies.
func (f admin) openAll(recs []*retrysafe.Record, withBodies bool) {
	// Records a store returns are read-only: each changed one is a copy.
	for i, rec := range recs {
		if rec.Response == nil {
			continue
		}
		c := *rec
		if resp, err := f.s.open(rec.Scope, rec.Key, rec.Response); err == nil {
			c.Response = resp
		}
		if !withBodies {
			resp := *c.Response
			resp.Body = nil
			c.Response = &resp
		}
		recs[i] = &c
	}
}

// Stats is the inner store's Stats: its records are processing ones,
// which hold no response to open.
func (f admin) Stats(ctx context.Context, p *retrysafe.StatsParams) (*retrysafe.Stats, error) {
	return f.a.Stats(ctx, p)
}

// Delete is the inner store's Delete.
func (f admin) Delete(ctx context.Context, scope, key string) error {
	return f.a.Delete(ctx, scope, key)
}

// withOptional returns s with the optional interfaces of s.inner.
func (s *store) withOptional() retrysafe.Store {
	p, hasP := s.inner.(retrysafe.Pinger)
	sw, hasS := s.inner.(retrysafe.Sweeper)
	n, hasN := s.inner.(retrysafe.Notifier)
	a, hasA := s.inner.(retrysafe.Admin)
	fp, fs, fn, fa := pinger{p}, sweeper{sw}, notifier{n}, admin{s, a}
	type mask struct{ p, s, n, a bool }
	switch (mask{hasP, hasS, hasN, hasA}) {
	case mask{false, false, false, false}:
		return s
	case mask{true, false, false, false}:
		return struct {
			*store
			pinger
		}{s, fp}
	case mask{false, true, false, false}:
		return struct {
			*store
			sweeper
		}{s, fs}
	case mask{true, true, false, false}:
		return struct {
			*store
			pinger
			sweeper
		}{s, fp, fs}
	case mask{false, false, true, false}:
		return struct {
			*store
			notifier
		}{s, fn}
	case mask{true, false, true, false}:
		return struct {
			*store
			pinger
			notifier
		}{s, fp, fn}
	case mask{false, true, true, false}:
		return struct {
			*store
			sweeper
			notifier
		}{s, fs, fn}
	case mask{true, true, true, false}:
		return struct {
			*store
			pinger
			sweeper
			notifier
		}{s, fp, fs, fn}
	case mask{false, false, false, true}:
		return struct {
			*store
			admin
		}{s, fa}
	case mask{true, false, false, true}:
		return struct {
			*store
			pinger
			admin
		}{s, fp, fa}
	case mask{false, true, false, true}:
		return struct {
			*store
			sweeper
			admin
		}{s, fs, fa}
	case mask{true, true, false, true}:
		return struct {
			*store
			pinger
			sweeper
			admin
		}{s, fp, fs, fa}
	case mask{false, false, true, true}:
		return struct {
			*store
			notifier
			admin
		}{s, fn, fa}
	case mask{true, false, true, true}:
		return struct {
			*store
			pinger
			notifier
			admin
		}{s, fp, fn, fa}
	case mask{false, true, true, true}:
		return struct {
			*store
			sweeper
			notifier
			admin
		}{s, fs, fn, fa}
	default:
		return struct {
			*store
			pinger
			sweeper
			notifier
			admin
		}{s, fp, fs, fn, fa}
	}
}
