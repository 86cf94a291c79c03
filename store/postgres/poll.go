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

// Polling notifications. Behind a pooler in transaction mode a LISTEN
// would bind a server session that the pooler hands to other clients, and
// its notifications would be lost: without [Config.NotifyConnString] the
// Store polls instead. A poller reads, every [Config.NotifyPollInterval]
// and in one statement, the owner token of every record that someone waits
// for, and wakes the waiters of a record whose token changed since the
// last read (the record was completed, released, deleted or taken over).
// It compares states, not events, so a change made while the database was
// unreachable is still seen at the next successful read.

// recordID names a record of the Store's table.
type recordID struct{ scope, key string }

// poller owns the polling subscriptions of one Store.
type poller struct {
	s    *Store
	subs waiters.Registry[recordID]

	mu      sync.Mutex
	tokens  map[recordID]string // the token last seen for each waited-for record; "" = not processing
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func newPoller(s *Store) *poller {
	return &poller{s: s, tokens: make(map[recordID]string)}
}

// subscribe reads the record's token (so a failing database fails
// Subscribe, and later reads have a state to compare with) and registers
// the waiter. A record that is not processing any more wakes it at once.
func (p *poller) subscribe(ctx context.Context, scope, key string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	var token string
	err := p.s.pool.QueryRow(ctx, p.s.sql.pollOne, scope, key).Scan(&token)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, p.s.wrap(ctx, "subscribe", err)
	}
	id := recordID{scope, key}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil, retrysafe.Unavailable("subscribe", errors.New("postgres: store closed"))
	}
	w, first := p.subs.Add(id)
	if first {
		p.tokens[id] = token
	}
	if !p.started {
		p.started = true
		runCtx, cancel := context.WithCancel(context.Background())
		p.cancel, p.done = cancel, make(chan struct{})
		go p.run(runCtx)
	}
	p.mu.Unlock()
	if token == "" {
		p.subs.Notify(id) // completed or gone already: re-read now
	}
	unsubscribe := func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.subs.Remove(w) {
			delete(p.tokens, id)
		}
	}
	return w.C(), unsubscribe, nil
}

// run polls until ctx is done.
func (p *poller) run(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.s.cfg.NotifyPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A failed read is retried at the next tick; nothing is lost,
		// since the next read compares the records' current state.
		_ = p.pollOnce(ctx)
	}
}

// pollOnce reads the tokens of every waited-for record and wakes the
// waiters of those that changed.
func (p *poller) pollOnce(ctx context.Context) error {
	p.mu.Lock()
	if len(p.tokens) == 0 {
		p.mu.Unlock()
		return nil
	}
	ids := make([]recordID, 0, len(p.tokens))
	scopes := make([]string, 0, len(p.tokens))
	keys := make([]string, 0, len(p.tokens))
	for id := range p.tokens {
		ids = append(ids, id)
		scopes = append(scopes, id.scope)
		keys = append(keys, id.key)
	}
	p.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, max(5*time.Second, 10*p.s.cfg.NotifyPollInterval))
	defer cancel()
	rows, err := p.s.pool.Query(ctx, p.s.sql.pollMany, scopes, keys)
	if err != nil {
		return err
	}
	current := make([]string, len(ids))
	for rows.Next() {
		var (
			i     int64
			token *string
		)
		if err := rows.Scan(&i, &token); err != nil {
			rows.Close()
			return err
		}
		if i >= 1 && int(i) <= len(ids) && token != nil {
			current[i-1] = *token
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, id := range ids {
		last, ok := p.tokens[id]
		if !ok || last == current[i] {
			continue
		}
		p.tokens[id] = current[i]
		p.subs.Notify(id)
	}
	return nil
}

// close stops polling and wakes every subscriber a last time.
func (p *poller) close() {
	p.mu.Lock()
	p.closed = true
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	p.subs.Close()
}
