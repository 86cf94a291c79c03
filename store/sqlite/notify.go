package sqlite

import "context"

type subscriber struct {
	ch chan struct{}
}

// Subscribe returns a channel that receives a value after the record for key
// in scope is completed, released or deleted through this Store value, and
// a function that ends the subscription. The subscription also ends when
// ctx is done.
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
	sub := &subscriber{ch: make(chan struct{}, 1)}
	id := subscriptionID(scope, key)
	s.subs.mu.Lock()
	set := s.subs.m[id]
	if set == nil {
		set = make(map[*subscriber]struct{})
		s.subs.m[id] = set
	}
	set[sub] = struct{}{}
	s.subs.mu.Unlock()

	remove := func() {
		s.subs.mu.Lock()
		defer s.subs.mu.Unlock()
		if set := s.subs.m[id]; set != nil {
			delete(set, sub)
			if len(set) == 0 {
				delete(s.subs.m, id)
			}
		}
	}
	stop := context.AfterFunc(ctx, remove)
	return sub.ch, func() { stop(); remove() }, nil
}

func subscriptionID(scope, key string) string {
	return scope + "\x00" + key
}

// notify wakes every subscriber of scope/key without blocking.
func (s *subscribers) notify(scope, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.m[subscriptionID(scope, key)] {
		select {
		case sub.ch <- struct{}{}:
		default:
		}
	}
}
