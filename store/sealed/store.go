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
	// encryption as they are, instead of failing with [ErrCannotDecrypt],
	// and finds the records stored before encryption was turned on under
	// their scope in the clear (a claim of a key that has such a record
	// goes to it). Turn it on for one TTL after enabling encryption over
	// a store that already holds records, so their retries still replay;
	// leave it off otherwise, since anyone who can write to the store
	// could then plant a response of their own. While it is on, every
	// Claim first reads the record under the scope in the clear (one more
	// round trip).
	AcceptPlaintext bool
}

// store seals responses on Complete and opens them on Claim, Get and List,
// and keeps scopes and fingerprints under the ring's HMAC key (see index).
type store struct {
	inner retrysafe.Store
	ring  *KeyRing // nil: write in the clear, refuse sealed records
	cfg   Config
	// stored: scopes and fingerprints are taken and given as the inner
	// store keeps them (see StoredScopes).
	stored bool
}

var _ retrysafe.Store = (*store)(nil)

// New returns a Store that seals every response it completes with ring and
// opens every response it reads. With a ring, the inner store keeps each
// record under [KeyRing.Scope] of its scope and an encrypted form of its
// fingerprint; Claim and Get give back the caller's scope and fingerprint,
// while Admin shows and takes the stored scopes (the HMAC) and shows the
// stored fingerprints. The returned Store has exactly the optional
// abilities that inner has, found with [retrysafe.As]; its Admin.List
// opens the records it can and leaves the others sealed (see [KeyID]).
//
// A nil ring writes in the clear (scopes and fingerprints too) and refuses
// to return a sealed response (with [ErrCannotDecrypt]), so a gateway
// started without its keys never replays ciphertext as if it were the
// answer.
func New(inner retrysafe.Store, ring *KeyRing, cfg Config) (retrysafe.Store, error) {
	if inner == nil {
		return nil, errors.New("sealed: nil inner store")
	}
	s := &store{inner: inner, ring: ring, cfg: cfg}
	return s.withOptional(), nil
}

// scope returns the scope under which the inner store keeps scope.
func (s *store) scope(scope string) string {
	if s.ring == nil || s.stored {
		return scope
	}
	return s.ring.index.scope(scope)
}

// StoredScopes returns a Store over the same records as s, a Store that
// [New] returned, that takes and gives scopes and fingerprints as the inner
// store keeps them: as its Admin shows them. Writes through it seal as s
// does, and reads open. An operator's tool or the completer
// ([retrysafe.Executor.ResolveStranded]) that acts on records listed with
// Admin writes through it, fenced by the tokens listed. ok is false when s
// is not such a Store.
func StoredScopes(s retrysafe.Store) (st retrysafe.Store, ok bool) {
	w, ok := retrysafe.As[*store](s)
	if !ok {
		return nil, false
	}
	c := *w
	c.stored = true
	return &c, true
}

// clearToo reports whether records stored in the clear are looked up too.
func (s *store) clearToo() bool { return s.ring != nil && s.cfg.AcceptPlaintext }

// open returns the readable form of a stored response. scope is the
// stored scope, which the sealed response is bound to.
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

// Claim claims through the inner store under the stored scope and
// fingerprint, and opens the response of a completed record that blocks
// the claim.
func (s *store) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	q := *p
	if s.ring != nil {
		q.Scope, q.Fingerprint = s.scope(p.Scope), s.ring.index.sealFingerprint(p.Fingerprint)
		if s.stored {
			q.Fingerprint = p.Fingerprint
		}
		if s.clearToo() {
			// A record stored before encryption was turned on is
			// claimed where it is, in the clear.
			_, err := s.inner.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: p.Now})
			switch {
			case err == nil:
				q = *p
			case !errors.Is(err, retrysafe.ErrNotFound):
				return nil, err
			}
		}
	}
	res, err := s.inner.Claim(ctx, &q)
	if err != nil || res == nil || res.Record == nil {
		return res, err
	}
	if s.ring == nil && res.Record.Response == nil && res.Record.Checkpoint == nil {
		return res, nil // nothing to map or open
	}
	rec, err := s.opened(res.Record, p.Scope)
	if err != nil {
		return nil, err
	}
	return &retrysafe.ClaimResult{Claimed: res.Claimed, Record: rec}, nil
}

// opened returns a copy of rec, a record the inner store keeps under
// rec.Scope, with its response and checkpoint opened and the caller's
// scope and fingerprint. Records a store returns are read-only (they may
// share bytes with what the store keeps), so rec itself is never changed.
func (s *store) opened(rec *retrysafe.Record, scope string) (*retrysafe.Record, error) {
	resp, err := s.open(rec.Scope, rec.Key, rec.Response)
	if err != nil {
		return nil, err
	}
	cp, err := s.openCheckpoint(rec.Scope, rec.Key, rec.Checkpoint)
	if err != nil {
		return nil, err
	}
	c := *rec
	c.Response = resp
	c.Checkpoint = cp
	c.Scope = scope
	if s.ring != nil && !s.stored {
		if fp, ok := s.ring.index.openFingerprint(rec.Fingerprint); ok {
			c.Fingerprint = fp
		}
	}
	return &c, nil
}

// Get reads through the inner store and opens the record's response.
func (s *store) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	q := *p
	q.Scope = s.scope(p.Scope)
	rec, err := s.inner.Get(ctx, &q)
	if errors.Is(err, retrysafe.ErrNotFound) && s.clearToo() {
		rec, err = s.inner.Get(ctx, p)
	}
	if err != nil || rec == nil {
		return rec, err
	}
	return s.opened(rec, p.Scope)
}

// Extend extends (renews, abandons, checkpoints) through the inner store,
// under the stored scope, with the checkpoint's data sealed. Without a
// ring it stores the checkpoint in the clear, and refuses data that would
// read back as sealed.
func (s *store) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	if s.ring == nil {
		if sealedCheckpoint(p.Checkpoint) {
			return errMarkedCheckpoint
		}
		return s.inner.Extend(ctx, p)
	}
	err := s.inner.Extend(ctx, s.ring.sealExtendAt(p, s.scope(p.Scope)))
	if errors.Is(err, retrysafe.ErrLeaseLost) && s.clearToo() {
		// A record stored in the clear, its checkpoint sealed for the
		// scope it is kept under.
		err = s.inner.Extend(ctx, s.ring.sealExtendAt(p, p.Scope))
	}
	return err
}

// Complete seals the response and completes through the inner store,
// under the stored scope. Without a ring it stores the response in the
// clear, without [MarkerHeader] should a handler have set it, so that
// only the wrapper ever marks a response sealed.
func (s *store) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	if s.ring == nil {
		if p.Response != nil {
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
	q, err := s.ring.sealCompleteAt(p, s.scope(p.Scope))
	if err != nil {
		return err
	}
	err = s.inner.Complete(ctx, q)
	if errors.Is(err, retrysafe.ErrLeaseLost) && s.clearToo() {
		// A record stored in the clear, sealed for the scope it is kept
		// under.
		if q, err = s.ring.sealCompleteAt(p, p.Scope); err != nil {
			return err
		}
		err = s.inner.Complete(ctx, q)
	}
	return err
}

// Release releases through the inner store, under the stored scope.
func (s *store) Release(ctx context.Context, p *retrysafe.ReleaseParams) error {
	q := *p
	q.Scope = s.scope(p.Scope)
	err := s.inner.Release(ctx, &q)
	if errors.Is(err, retrysafe.ErrLeaseLost) && s.clearToo() {
		err = s.inner.Release(ctx, p)
	}
	return err
}

// Unwrap returns the store this one wraps, so that [retrysafe.As] finds
// the abilities the wrapper does not change (Pinger, ReadyChecker,
// Sweeper, Batcher, …).
func (s *store) Unwrap() retrysafe.Store { return s.inner }
