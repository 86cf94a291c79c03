package sealed

import (
	"context"

	"github.com/retrysafe/retrysafe"
)

// CompleteStored completes the record that Admin returned under its
// stored scope (p.Scope as List and Find give it: with a ring, the HMAC),
// fenced by p.Token like Complete: an operator resolving an unknown
// outcome (retrysafe keys resolve, the operator page). With a ring the
// response is sealed for that stored scope, so the gateway replays it as
// any other; Complete would take p.Scope for a caller's scope and key it
// again.
func (l *adminLayer) CompleteStored(ctx context.Context, p *retrysafe.CompleteParams) error {
	if l.s.ring == nil {
		return l.s.Complete(ctx, p) // the scope is kept as given
	}
	q, err := l.s.ring.sealCompleteAt(p, p.Scope)
	if err != nil {
		return err
	}
	return l.s.inner.Complete(ctx, q)
}

// ReleaseStored releases the record that Admin returned under its stored
// scope, fenced by p.Token like Release (see [adminLayer.CompleteStored]).
func (l *adminLayer) ReleaseStored(ctx context.Context, p *retrysafe.ReleaseParams) error {
	return l.s.inner.Release(ctx, p)
}
