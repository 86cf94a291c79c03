package postgres

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/waiters"
)

// Subscribe implements [retrysafe.Notifier]. The returned channel receives a
// value after the record scope/key is completed, released or deleted by any
// Store on the same table and channel, in any process.
//
// Notifications travel by LISTEN/NOTIFY. Each Store keeps one dedicated
// listener connection (opened on the first Subscribe, outside the pool,
// with the pool's ConnConfig or the one [Config.NotifyConnString] names;
// pool hooks such as BeforeConnect do not run for it) and fans notifications out to its subscribers; the payload is a hash of scope and key, never the key itself.
// When that connection fails the Store reconnects with backoff and then
// wakes every subscriber, since notifications sent meanwhile were lost.
//
// Only records someone waits for are announced: Subscribe sets the record's
// notify flag (one UPDATE, and only while the record is processing), and
// Complete, Release and Delete call pg_notify in the same statement only
// when the flag is set. PostgreSQL holds a database-wide lock from a
// notifying transaction's pre-commit through its WAL flush, so notifying on
// every completion would serialise all completions; see
// docs/performance-postgres.md. The flag is written under the row lock, so
// a completion that commits after Subscribe returned always sees it. If the
// record is held by an uncommitted CompleteTx, Subscribe waits for that
// transaction (bounded by ctx) and then returns.
//
// With [Config.PoolMode] "transaction" and no NotifyConnString there is no
// session to LISTEN on: Subscribe then reads the record's owner token, and
// the Store reads the tokens of every waited-for record once per
// [Config.NotifyPollInterval] in one statement, waking the waiters of the
// records whose token changed (completed, released, deleted or taken
// over). No notify flag is written and no NOTIFY is sent for them.
//
// Notifications are hints: a waiter must re-read the record after each
// value and keep polling at a slow interval as a fallback (the engine's wait
// mode does both), because a notification can still be missed, for example
// by a Store on another channel name.
//
// ctx bounds the call only: the subscription lasts until the returned
// function is called (it may be called more than once) or the Store is
// closed, which wakes every subscriber a last time. Subscribe returns an
// error wrapping [retrysafe.ErrStoreUnavailable] when the listener
// connection cannot be established or the flag not written.
func (s *Store) Subscribe(ctx context.Context, scope, key string) (<-chan struct{}, func(), error) {
	if s.poller != nil {
		return s.poller.subscribe(ctx, scope, key)
	}
	ch, unsubscribe, err := s.listener.subscribe(ctx, notifyPayload(scope, key))
	if err != nil {
		return nil, nil, err
	}
	if _, err := s.pool.Exec(ctx, s.sql.subscribe, scope, key); err != nil {
		unsubscribe()
		return nil, nil, s.wrap(ctx, "subscribe", err)
	}
	return ch, unsubscribe, nil
}

// listener owns the dedicated LISTEN connection of one Store.
type listener struct {
	connConfig *pgx.ConnConfig
	channel    string

	subs waiters.Registry[string] // by payload

	mu      sync.Mutex
	started bool
	closed  bool
	up      bool          // LISTEN is active on a live connection
	everUp  bool          // LISTEN was active once: later outages end in a wake-up
	lastErr error         // why the last connection attempt failed
	changed chan struct{} // closed (and replaced) when up or lastErr change
	cancel  context.CancelFunc
	done    chan struct{}
}

func newListener(cc *pgx.ConnConfig, channel string) *listener {
	return &listener{
		connConfig: cc,
		channel:    channel,
		changed:    make(chan struct{}),
	}
}

func (l *listener) subscribe(ctx context.Context, payload string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, nil, retrysafe.Unavailable("subscribe", errors.New("store closed"))
	}
	ch, unsubscribe := l.subs.Subscribe(payload)
	if !l.started {
		l.started = true
		runCtx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go l.run(runCtx)
	}
	l.mu.Unlock()

	// Wait until LISTEN is active, so that every change committed after we
	// return is seen; give up on the first failed connection attempt. While
	// a listener that once worked reconnects, subscribing succeeds at once:
	// the reconnection wakes every subscriber, which covers the changes
	// that no connection heard.
	for {
		l.mu.Lock()
		up, everUp, err, changed := l.up, l.everUp, l.lastErr, l.changed
		l.mu.Unlock()
		if up || everUp {
			return ch, unsubscribe, nil
		}
		if err != nil {
			unsubscribe()
			return nil, nil, retrysafe.Unavailable("subscribe", err)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			unsubscribe()
			return nil, nil, ctx.Err()
		}
	}
}

// setState records the connection state and wakes Subscribe calls waiting
// for it.
func (l *listener) setState(up bool, err error) {
	l.mu.Lock()
	l.up, l.lastErr = up, err
	l.everUp = l.everUp || up
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// Reconnect backoff of the listener connection.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	backoff := listenBackoffMin
	for ctx.Err() == nil {
		err := l.listenOnce(ctx, func() { backoff = listenBackoffMin })
		if ctx.Err() != nil {
			break
		}
		l.setState(false, err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
	l.setState(false, errors.New("store closed"))
}

// listenOnce connects, listens and delivers notifications until the
// connection fails or ctx is done.
func (l *listener) listenOnce(ctx context.Context, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, l.connConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return err
	}
	connected()
	l.mu.Lock()
	reconnect := l.everUp
	l.mu.Unlock()
	l.setState(true, nil)
	if reconnect {
		// Changes made while no connection listened were not announced.
		l.subs.NotifyAll()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.subs.Notify(n.Payload)
	}
}

// close stops the listener and waits for its connection to close.
func (l *listener) close() {
	l.mu.Lock()
	l.closed = true
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	l.subs.Close()
}
