package mysql

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

// Subscribe implements [retrysafe.Notifier] within one process: the
// returned channel receives a value after the record scope/key is
// completed, released or deleted through this Store value. It returns a
// function that ends the subscription (it may be called more than once);
// ctx bounds the call only.
//
// MySQL and MariaDB have nothing like PostgreSQL's LISTEN/NOTIFY, so a
// change made by another process (or by [Store.CompleteTx], whose commit is
// the caller's) is not announced: a waiter sees it on the engine's fallback
// poll. Sends never block; the channel holds one pending value.
//
// Subscribe checks that the database answers (a subscription to a store
// that cannot change is useless) and returns an error matching
// [retrysafe.ErrStoreUnavailable] when it does not.
func (s *Store) Subscribe(ctx context.Context, scope, key string) (<-chan struct{}, func(), error) {
	if err := s.Ping(ctx); err != nil {
		return nil, nil, err
	}
	ch, unsubscribe := s.subs.Subscribe([2]string{scope, key})
	return ch, unsubscribe, nil
}
