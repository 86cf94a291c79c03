package sqlite

import (
	"context"

	"github.com/retrysafe/retrysafe/internal/waiters"
)

// subscribers is the in-process registry behind Subscribe, keyed by
// (scope, key).
type subscribers struct {
	waiters.Registry[[2]string]
}

// notify wakes every subscriber of scope/key without blocking.
func (s *subscribers) notify(scope, key string) { s.Notify([2]string{scope, key}) }

// Subscribe returns a channel that receives a value after the record for key
// in scope is completed, released or deleted through this Store value, and
// a function that ends the subscription (it may be called more than once).
// ctx bounds the call only: the subscription lasts until that function is
// called or the Store is closed. It implements [retrysafe.Notifier].
//
// Notifications are in-process only: SQLite has no cross-process
// notification, and CompleteTx does not notify (the commit is the
// caller's). Waiters in other processes, or waiting on a CompleteTx, see the
// change on the engine's fallback poll. Sends never block; the channel
// holds one pending value.
//
// Subscribe checks that the database answers (a subscription to a store
// that cannot change is useless) and returns an error matching
// [retrysafe.ErrStoreUnavailable] when it does not.
func (s *Store) Subscribe(ctx context.Context, scope, key string) (<-chan struct{}, func(), error) {
	if err := s.db.PingContext(ctx); err != nil {
		return nil, nil, s.translate(ctx, "subscribe", err)
	}
	ch, unsubscribe := s.subs.Subscribe([2]string{scope, key})
	return ch, unsubscribe, nil
}
