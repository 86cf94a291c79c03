package sealed

import (
	"context"
	"errors"
	"fmt"

	"github.com/retrysafe/retrysafe"
)

// Config adjusts the Store that [New] returns. The zero value is strict.
type Config struct {
	// AcceptPlaintext returns responses that were stored without
	// encryption as they are, instead of failing with [ErrCannotDecrypt].
	// Turn it on for one TTL after enabling encryption over a store that
	// already holds records, so their retries still replay; leave it off
	// otherwise, since anyone who can write to the store could then plant
	// a response of their own.
	AcceptPlaintext bool
}

// store seals responses on Complete and opens them on Claim, Get and List.
type store struct {
	inner retrysafe.Store
	ring  *KeyRing // nil: write in the clear, refuse sealed records
	cfg   Config
}

var _ retrysafe.Store = (*store)(nil)

// New returns a Store that seals every response it completes with ring and
// opens every response it reads. The returned Store has exactly the
// optional abilities that inner has, found with [retrysafe.As]; its
// Admin.List opens the records it can and leaves the others sealed (see
// [KeyID]).
//
// A nil ring writes in the clear and refuses to return a sealed response
// (with [ErrCannotDecrypt]), so a gateway started without its keys never
// replays ciphertext as if it were the answer.
func New(inner retrysafe.Store, ring *KeyRing, cfg Config) (retrysafe.Store, error) {
	if inner == nil {
		return nil, errors.New("sealed: nil inner store")
	}
	s := &store{inner: inner, ring: ring, cfg: cfg}
	return s.withOptional(), nil
}

// open returns the readable form of a stored response.
func (s *store) open(scope, key string, resp *retrysafe.Response) (*retrysafe.Response, error) {
	if resp == nil {
		return nil, nil
	}
	if s.ring == nil {
		if id, ok := KeyID(resp); ok {
			return nil, fmt.Errorf("%w: it was sealed with key %q and no key ring is configured (retrysafe serve: --encryption-keys-file or RETRYSAFE_ENCRYPTION_KEYS)", ErrCannotDecrypt, id)
		}
		return resp, nil
	}
	if _, ok := KeyID(resp); !ok && s.cfg.AcceptPlaintext {
		return resp, nil
	}
	return s.ring.Open(scope, key, resp)
}

// Claim claims through the inner store and opens the response of a
// completed record that blocks the claim.
func (s *store) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	res, err := s.inner.Claim(ctx, p)
	if err != nil || res == nil || res.Record == nil || res.Record.Response == nil {
		return res, err
	}
	rec, err := s.opened(res.Record)
	if err != nil {
		return nil, err
	}
	return &retrysafe.ClaimResult{Claimed: res.Claimed, Record: rec}, nil
}

// opened returns a copy of rec with its response opened. Records a store
// returns are read-only (the memory store hands out the record it holds),
// so rec itself is never changed.
func (s *store) opened(rec *retrysafe.Record) (*retrysafe.Record, error) {
	resp, err := s.open(rec.Scope, rec.Key, rec.Response)
	if err != nil {
		return nil, err
	}
	c := *rec
	c.Response = resp
	return &c, nil
}

// Get reads through the inner store and opens the record's response.
func (s *store) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	rec, err := s.inner.Get(ctx, p)
	if err != nil || rec == nil || rec.Response == nil {
		return rec, err
	}
	return s.opened(rec)
}

// Extend is the inner store's Extend.
func (s *store) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	return s.inner.Extend(ctx, p)
}

// Complete seals the response and completes through the inner store.
// Without a ring it stores the response in the clear, without
// [MarkerHeader] should a handler have set it, so that only the wrapper
// ever marks a response sealed.
func (s *store) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	if s.ring != nil {
		var err error
		if p, err = s.ring.SealComplete(p); err != nil {
			return err
		}
	} else if p.Response != nil {
		if _, marked := p.Response.Header[MarkerHeader]; marked {
			c, resp := *p, *p.Response
			resp.Header = p.Response.Header.Clone()
			delete(resp.Header, MarkerHeader)
			c.Response = &resp
			p = &c
		}
	}
	return s.inner.Complete(ctx, p)
}

// Release is the inner store's Release.
func (s *store) Release(ctx context.Context, p *retrysafe.ReleaseParams) error {
	return s.inner.Release(ctx, p)
}

// Unwrap returns the store this one wraps, so that [retrysafe.As] finds
// the abilities the wrapper does not change (Pinger, Sweeper, Notifier,
// Batcher, …).
func (s *store) Unwrap() retrysafe.Store { return s.inner }
