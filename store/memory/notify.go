package memory

import "context"

// Subscribe implements [retrysafe.Notifier]. The channel (buffer 1)
// receives a value when the record is completed, released or deleted. ctx
// bounds the call only: the subscription lasts until the returned function
// is called (it may be called more than once) or the store is closed,
// which wakes every subscriber a last time.
func (s *Store) Subscribe(ctx context.Context, scope, key string) (<-chan struct{}, func(), error) {
	i := id{scope, key}
	sh, _, err := s.lock(ctx, "subscribe", i)
	if err != nil {
		return nil, nil, err
	}
	defer sh.mu.Unlock()
	ch, unsubscribe := s.subs.Subscribe(i)
	return ch, unsubscribe, nil
}

// notifyLocked signals every subscriber of i without blocking.
func (s *Store) notifyLocked(i id) { s.subs.Notify(i) }

// subscriptions returns the number of live subscriptions (for tests).
func (s *Store) subscriptions() int { return s.subs.Len() }
