package memory

import (
	"context"
	"sync"
)

// subscription is one Subscribe call's channel.
type subscription struct {
	ch chan struct{}
	// cancelAfter stops the context.AfterFunc that ends the subscription
	// when the subscriber's context is done.
	cancelAfter func() bool
}

// Subscribe implements [retrysafe.Notifier]. The channel (buffer 1)
// receives a value when the record is completed, released or deleted. The
// subscription ends when the returned function is called (it may be called
// more than once) or when ctx is done, whichever comes first; Close ends
// every subscription and closes its channel.
func (s *Store) Subscribe(ctx context.Context, scope, key string) (<-chan struct{}, func(), error) {
	if err := s.lock(ctx, "subscribe"); err != nil {
		return nil, nil, err
	}
	defer s.mu.Unlock()
	i := id{scope, key}
	sub := &subscription{ch: make(chan struct{}, 1)}
	set := s.subs[i]
	if set == nil {
		set = make(map[*subscription]struct{})
		s.subs[i] = set
	}
	set[sub] = struct{}{}

	var once sync.Once
	unsubscribe := func() {
		once.Do(func() {
			s.mu.Lock()
			stop := sub.cancelAfter
			s.removeLocked(i, sub)
			s.mu.Unlock()
			if stop != nil {
				stop()
			}
		})
	}
	// Assigned under s.mu, which unsubscribe takes before reading it.
	sub.cancelAfter = context.AfterFunc(ctx, unsubscribe)
	return sub.ch, unsubscribe, nil
}

func (s *Store) removeLocked(i id, sub *subscription) {
	set := s.subs[i] // nil once closed
	if _, ok := set[sub]; !ok {
		return
	}
	delete(set, sub)
	if len(set) == 0 {
		delete(s.subs, i)
	}
}

// notifyLocked signals every subscriber of i without blocking.
func (s *Store) notifyLocked(i id) {
	for sub := range s.subs[i] {
		select {
		case sub.ch <- struct{}{}:
		default: // a signal is already pending
		}
	}
}

// subscriptions returns the number of live subscriptions (for tests).
func (s *Store) subscriptions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, set := range s.subs {
		n += len(set)
	}
	return n
}
