package redis

import (
	"context"
	"errors"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/waiters"
)

// Subscribe returns a channel that receives a value after the record
// (scope, key) is completed, released or deleted, and a function that ends
// the subscription (safe to call more than once). It implements
// [retrysafe.Notifier].
//
// All subscriptions of a Store share one pub/sub connection, opened on the
// first call; the record's channel is subscribed while it has at least one
// waiter. Subscribe returns after Redis confirmed the subscription and the
// record is marked as waited for: Complete publishes only for a marked
// record (a PUBLISH per completion would cost every request, and every
// node of a cluster, for the rare one somebody waits for). The mark is set
// atomically and only on a processing record, after SUBSCRIBE, so a
// completion either comes after it and is published, or came before it,
// and then Subscribe finds the record completed (or absent) and sends a
// value at once. A takeover by the claim script keeps the mark; Release
// and Delete always publish.
//
// Every change published afterwards reaches the channel unless the
// connection breaks. After a reconnect each waiter receives a value, so
// that it re-reads the record; a waiter must still poll as a fallback
// (waiters of an earlier release, which do not mark records, hear a
// completion by this one only through that poll). ctx bounds the call
// only: the subscription lasts until the returned function is called or
// the Store is closed, which wakes every waiter a last time.
func (s *Store) Subscribe(ctx context.Context, scope, key string) (<-chan struct{}, func(), error) {
	k := s.recordKey(scope, key)
	ch, cancel, err := s.notify.subscribe(ctx, k)
	if err != nil {
		return nil, nil, err
	}
	marked, err := markScript.Run(ctx, s.pipe, []string{k}).Int64()
	if err != nil {
		cancel()
		return nil, nil, s.fail(ctx, "subscribe", err)
	}
	if marked == 0 {
		s.notify.wake(k) // changed before the mark: re-read now
	}
	return ch, cancel, nil
}

// unsubscribeTimeout bounds the UNSUBSCRIBE sent when the last waiter of a
// channel leaves.
const unsubscribeTimeout = 5 * time.Second

// notifier multiplexes one goredis.PubSub over many waiters.
type notifier struct {
	client goredis.UniversalClient
	// waiters are keyed by channel. n.mu is held around Add and Remove,
	// so that the first waiter's SUBSCRIBE and the last one's
	// UNSUBSCRIBE are ordered.
	waiters waiters.Registry[string]

	mu       sync.Mutex
	ps       *goredis.PubSub // nil until the first subscribe
	closed   bool
	channels map[string]*channelState // channels with waiters
	// pending counts SUBSCRIBE commands sent per channel whose
	// confirmation has not arrived. A confirmation beyond that count comes
	// from go-redis resubscribing after a reconnect.
	pending map[string]int
	done    chan struct{} // closed when the receive loop ends
}

// channelState is the subscription state of one channel with waiters.
type channelState struct {
	confirmed chan struct{} // closed at the first subscribe confirmation
	isConfirm bool
}

func newNotifier(client goredis.UniversalClient) *notifier {
	return &notifier{
		client:   client,
		channels: make(map[string]*channelState),
		pending:  make(map[string]int),
	}
}

var errClosed = errors.New("retrysafe/redis: store closed")

func (n *notifier) subscribe(ctx context.Context, channel string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, nil, retrysafe.Unavailable("subscribe", errClosed)
	}
	if n.ps == nil {
		// No channels yet: go-redis connects lazily, in the receive loop.
		n.ps = n.client.Subscribe(context.WithoutCancel(ctx))
		n.done = make(chan struct{})
		go n.receive(n.ps, n.done)
	}
	w, first := n.waiters.Add(channel)
	if first {
		n.channels[channel] = &channelState{confirmed: make(chan struct{})}
		n.pending[channel]++
		if err := n.ps.Subscribe(ctx, channel); err != nil {
			// go-redis remembers the channel and subscribes it again on
			// reconnect; forget it.
			n.pending[channel]--
			delete(n.channels, channel)
			n.waiters.Remove(w)
			n.unsubscribeLocked(channel)
			n.mu.Unlock()
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			return nil, nil, retrysafe.Unavailable("subscribe", err)
		}
	}
	confirmed := n.channels[channel].confirmed
	n.mu.Unlock()

	cancel := func() { n.leave(channel, w) }
	select {
	case <-confirmed:
		return w.C(), cancel, nil
	case <-ctx.Done():
		cancel()
		return nil, nil, ctx.Err()
	}
}

// leave removes waiter w (again: nothing); the last waiter of a channel
// unsubscribes it.
func (n *notifier) leave(channel string, w *waiters.Waiter[string]) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.waiters.Remove(w) {
		return
	}
	delete(n.channels, channel)
	if !n.closed {
		n.unsubscribeLocked(channel)
	}
}

// unsubscribeLocked sends UNSUBSCRIBE. It runs under n.mu so that it is
// ordered with SUBSCRIBE commands for the same channel.
func (n *notifier) unsubscribeLocked(channel string) {
	ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
	defer cancel()
	// An error leaves the channel subscribed on a broken connection; go-redis
	// has already forgotten it and will not subscribe it again.
	_ = n.ps.Unsubscribe(ctx, channel)
}

// receive dispatches messages until the PubSub is closed.
func (n *notifier) receive(ps *goredis.PubSub, done chan struct{}) {
	defer close(done)
	for msg := range ps.ChannelWithSubscriptions(goredis.WithChannelSize(256)) {
		switch m := msg.(type) {
		case *goredis.Message:
			n.wake(m.Channel)
		case *goredis.Subscription:
			if m.Kind == "subscribe" {
				n.confirm(m.Channel)
			}
		}
	}
}

// wake sends a value to every waiter of channel without blocking.
func (n *notifier) wake(channel string) { n.waiters.Notify(channel) }

// confirm handles a subscribe confirmation. Once every SUBSCRIBE sent for
// the channel is confirmed, the waiters blocked in subscribe are released
// (an earlier confirmation may belong to a subscription that was ended
// since). A confirmation that was not expected follows a reconnect, during
// which messages may have been lost, so it wakes the waiters.
func (n *notifier) confirm(channel string) {
	n.mu.Lock()
	expected := n.pending[channel] > 0
	if expected {
		n.pending[channel]--
		if n.pending[channel] == 0 {
			delete(n.pending, channel)
		}
	}
	cw := n.channels[channel]
	if cw != nil && !cw.isConfirm && n.pending[channel] == 0 {
		cw.isConfirm = true
		close(cw.confirmed)
	}
	n.mu.Unlock()
	if !expected {
		n.wake(channel)
	}
}

// close ends the pub/sub connection and waits for the receive loop.
func (n *notifier) close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	ps, done := n.ps, n.done
	n.waiters.Close()
	n.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	return err
}
