package redis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// DefaultPrefix is the key prefix used when [Config.Prefix] is empty.
const DefaultPrefix = "retrysafe:"

// DefaultProcessingRetention is the default of [Config.ProcessingRetention]:
// [admin.DefaultProcessingRetention] (7 days), the retention every
// store's sweep applies by default.
const DefaultProcessingRetention = admin.DefaultProcessingRetention

// Config configures a [Store]. The zero value is valid.
type Config struct {
	// Prefix starts every key the store writes; default "retrysafe:".
	// Stores that share a Redis and a prefix share their records. The
	// prefix must not contain a hash tag ("{…}") if the records are to
	// spread over a Redis Cluster.
	Prefix string

	// ProcessingRetention is how long Redis keeps a processing record after
	// its lease ends (measured from the last Claim or Extend, on the
	// server's clock) before it drops the key: PX = Lease +
	// ProcessingRetention. Until then a retry takes the record over
	// (Attempt+1) and the owner may still complete it; afterwards the key
	// is absent and a retry runs as a new request (Attempt 1). Zero means
	// [DefaultProcessingRetention]; negative is an error.
	ProcessingRetention time.Duration

	// DisableAutoPipeline makes the store send each command on its own
	// instead of through the client's autopipeliner. By default, when the
	// client is a *goredis.Client, the store sends the commands of Claim,
	// Get, Complete, Release and Extend through client.AutoPipeline(), so
	// that concurrent callers share pipelined round trips (see
	// docs/performance-redis.md). That autopipeliner is go-redis's
	// (experimental) shared instance of the client: the store never
	// closes it, and closing the client stops it. A command it has queued
	// runs to its end whatever its context says, bounded by the client's
	// read and write timeouts.
	DisableAutoPipeline bool

	// WaitReplicas, when positive, makes a Claim that wins and every
	// Complete wait, with Redis WAIT on the connection that wrote, until
	// that many replicas acknowledged the write, at most WaitTimeout. A
	// claim that fewer replicas acknowledged is released again (a
	// takeover is left to its lease instead) and Claim fails with a
	// [*ReplicationError] that matches
	// [retrysafe.ErrStoreUnavailable] (the request gets 503 and nothing
	// runs); a Complete that fewer replicas acknowledged returns a
	// [*ReplicationError] that does not (the result is stored on the
	// primary and replays from there). WAIT is not consensus: see
	// docs/redis.md. It needs a client with one primary (a *goredis.Client,
	// which includes the failover client of Sentinel); [New] refuses it
	// with a ClusterClient. Zero (the default) waits for nothing.
	WaitReplicas int

	// WaitTimeout bounds each WAIT; zero means [DefaultWaitTimeout]. It
	// must be below the client's ReadTimeout, which bounds the reply.
	WaitTimeout time.Duration
}

// DefaultWaitTimeout is the default of [Config.WaitTimeout].
const DefaultWaitTimeout = time.Second

// Store is a [retrysafe.Store] on Redis. It also implements
// [admin.Pinger], [admin.ReadyChecker], [retrysafe.Notifier] and
// [admin.Admin]. It needs no [admin.Sweeper]: Redis expires the
// keys itself.
//
// A Store is safe for concurrent use. Create it with [New] or [Open] and
// release it with [Store.Close].
type Store struct {
	client     goredis.UniversalClient
	prefix     string
	retention  time.Duration
	ownsClient bool
	notify     *notifier
	// afterRead, when set by a test, runs in Claim between the plain read
	// and the claim script.
	afterRead func()
	// lastScope caches the key prefix of the last scope (scopePrefix).
	lastScope atomic.Pointer[scopedPrefix]
	// pipe sends the commands of Claim, Get, Complete, Release and
	// Extend: the client's autopipeliner (see Config.DisableAutoPipeline),
	// or the client itself.
	pipe pipe
	// waitClient sends a script and its WAIT in one pipeline, on one
	// connection; nil unless Config.WaitReplicas > 0.
	waitClient   *goredis.Client
	waitReplicas int
	waitTimeout  time.Duration
}

// pipe is what the record operations need of a client.
type pipe interface {
	goredis.Scripter
	HGetAll(ctx context.Context, key string) *goredis.MapStringStringCmd
}

var (
	_ retrysafe.Store    = (*Store)(nil)
	_ admin.Pinger       = (*Store)(nil)
	_ admin.ReadyChecker = (*Store)(nil)
	_ retrysafe.Notifier = (*Store)(nil)
	_ admin.Admin        = (*Store)(nil)
)

// New returns a Store that uses the caller's client: a *goredis.Client, a
// failover (Sentinel) client or a *goredis.ClusterClient. A *goredis.Ring
// is refused (see docs/redis.md). New performs no I/O: the scripts are
// loaded on first use. [Store.Close] does not close the client.
func New(client goredis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("retrysafe/redis: nil client")
	}
	if _, ok := client.(*goredis.Ring); ok {
		// A Ring drops a shard it thinks is down from its hash ring and
		// sends that shard's keys elsewhere: a second claim of a key can
		// then win on another shard while the first owner still runs.
		return nil, errors.New("retrysafe/redis: *redis.Ring is not supported: it moves keys between shards when one looks down, so two claims of one key could both win; use a single server, a failover (Sentinel) client or a Cluster")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.ProcessingRetention < 0 {
		return nil, fmt.Errorf("retrysafe/redis: negative ProcessingRetention %s", cfg.ProcessingRetention)
	}
	if cfg.ProcessingRetention == 0 {
		cfg.ProcessingRetention = DefaultProcessingRetention
	}
	s := &Store{
		client:    client,
		prefix:    cfg.Prefix,
		retention: cfg.ProcessingRetention,
	}
	if cfg.WaitReplicas < 0 || cfg.WaitTimeout < 0 {
		return nil, fmt.Errorf("retrysafe/redis: negative WaitReplicas (%d) or WaitTimeout (%s)", cfg.WaitReplicas, cfg.WaitTimeout)
	}
	if cfg.WaitReplicas > 0 {
		c, ok := client.(*goredis.Client)
		if !ok {
			return nil, fmt.Errorf("retrysafe/redis: WaitReplicas needs a client of one primary (*redis.Client or a failover client), not %T: WAIT acknowledges the writes of one connection to one primary", client)
		}
		if cfg.WaitTimeout == 0 {
			cfg.WaitTimeout = DefaultWaitTimeout
		}
		if rt := c.Options().ReadTimeout; rt > 0 && cfg.WaitTimeout >= rt {
			return nil, fmt.Errorf("retrysafe/redis: WaitTimeout %s must be below the client's ReadTimeout %s", cfg.WaitTimeout, rt)
		}
		s.waitClient, s.waitReplicas, s.waitTimeout = c, cfg.WaitReplicas, cfg.WaitTimeout
	}
	s.notify = newNotifier(client)
	s.pipe = client
	if c, ok := client.(*goredis.Client); ok && !cfg.DisableAutoPipeline {
		// An error (a closed client, invalid AutoPipelineOptions in the
		// client's options) leaves the plain client: its commands then
		// report the problem.
		if ap, err := c.AutoPipeline(); err == nil {
			s.pipe = ap
		}
	}
	return s, nil
}

// Open connects to Redis, loads the scripts, and returns a Store that owns
// the client: [Store.Close] closes it. url is either one server,
// redis://[user:password@]host:port/db or rediss://…, as parsed by
// goredis.ParseURL, or a Redis Cluster given by seed nodes,
// redis+cluster://[user:password@]host:port[,host:port…][?options] (or
// rediss+cluster:// for TLS), whose options are those of
// goredis.ParseClusterURL; the other nodes are discovered. It fails,
// wrapping [retrysafe.ErrStoreUnavailable], when the server does not answer
// within ctx. For a Sentinel setup build the client yourself and call
// [New].
func Open(ctx context.Context, url string, cfg Config) (*Store, error) {
	client, err := clientFromURL(url)
	if err != nil {
		return nil, fmt.Errorf("retrysafe/redis: %w", err)
	}
	s, err := New(client, cfg)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	s.ownsClient = true
	if err := s.loadScripts(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// Close ends the store's pub/sub connection and, if the store was created
// by [Open], closes its client. Subscriptions stop receiving values.
func (s *Store) Close() error {
	err := s.notify.close()
	if s.ownsClient {
		if cerr := s.client.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// Ping reports whether Redis answers. It implements [admin.Pinger].
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.client.Ping(ctx).Err(); err != nil {
		return s.fail(ctx, "ping", err)
	}
	return nil
}

// CheckReady reports whether Redis answers, as [Store.Ping] does, but fails
// at once when the server refuses connections. It implements
// [admin.ReadyChecker], for the gateway's /readyz.
//
// Ping on a server that refuses waits out go-redis's retries: each dial is
// tried Options.DialerRetries times (5), 100 ms apart, and the command
// MaxRetries more times (3), so it fails after about 1.7 s with the
// defaults. CheckReady first opens one connection with the client's own
// dialer (its address, TLS settings and, for a failover client, the
// master that Sentinel names), once, and closes it; only when that
// succeeds does it Ping through the client's pool, with the client's
// retries. The record operations keep those retries. A ClusterClient
// has no single dialer: there CheckReady is Ping.
func (s *Store) CheckReady(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c, ok := s.client.(*goredis.Client); ok {
		if err := dialOnce(ctx, c.Options()); err != nil {
			return s.fail(ctx, "ready", err)
		}
	}
	return s.Ping(ctx)
}

// dialOnce opens one connection with the dialer of opts and closes it. It
// returns when ctx ends even if the dialer ignores ctx (go-redis's TLS
// dialer is bounded only by Options.DialTimeout); a connection that
// arrives later is closed.
func dialOnce(ctx context.Context, opts *goredis.Options) error {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := opts.Dialer(ctx, opts.Network, opts.Addr)
		done <- result{conn, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return r.err
		}
		return r.conn.Close()
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				_ = r.conn.Close()
			}
		}()
		return ctx.Err()
	}
}

// loadScripts loads every script in one pipelined round trip, on every
// master of a cluster.
func (s *Store) loadScripts(ctx context.Context) error {
	load := func(ctx context.Context, c goredis.Cmdable) error {
		_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			// Not Script.Load: inside a pipeline it would record the
			// not-yet-received (empty) digest as the script's hash.
			for _, src := range allScriptSources {
				p.ScriptLoad(ctx, src)
			}
			return nil
		})
		return err
	}
	var err error
	if cc, ok := s.client.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error { return load(ctx, c) })
	} else {
		err = load(ctx, s.client)
	}
	if err != nil {
		return s.fail(ctx, "load scripts", err)
	}
	return nil
}

// scopeHashLen is the number of hex digits of sha256(scope) in a key name.
const scopeHashLen = 32

// scopeHash returns the fixed-width scope part of a key name.
func scopeHash(scope string) string {
	sum := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(sum[:])[:scopeHashLen]
}

// recordKey returns the Redis key of the record (scope, key):
// scopePrefix(scope) + slotTag(scope, key) + key. Its name is also the
// record's pub/sub channel.
func (s *Store) recordKey(scope, key string) string {
	return s.scopePrefix(scope) + slotTag(scope, key) + key
}

// slotTagLen is the length of a slot tag: '{', 8 hex digits, '}'.
const slotTagLen = 10

// slotTag returns the store's own Redis Cluster hash tag of a record,
// "{" + 8 hex digits of FNV-1a(scope, key) + "}". It comes before the
// idempotency key in the key name, and neither the prefix nor the scope
// hash holds a brace, so it is the first "{…}" of every name: Redis Cluster
// hashes only it, and a "{…}" in a client's key can never choose the slot.
// It spreads the records of every scope over all the slots.
func slotTag(scope, key string) string {
	h := fnv.New32a()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var b [slotTagLen]byte
	b[0], b[slotTagLen-1] = '{', '}'
	hex.Encode(b[1:slotTagLen-1], h.Sum(nil))
	return string(b[:])
}

// slotTagMatch matches any slot tag in a SCAN MATCH pattern.
var slotTagMatch = "{" + strings.Repeat("[0-9a-f]", slotTagLen-2) + "}"

// scopedPrefix is the part of a key name before the idempotency key.
type scopedPrefix struct{ scope, prefix string }

// scopePrefix returns s.prefix + scopeHash(scope) + ":". It remembers the
// last scope it saw: most stores serve one or a few scopes, and a request
// asks for the same scope in Claim and Complete, so this usually saves the
// SHA-256.
func (s *Store) scopePrefix(scope string) string {
	if last := s.lastScope.Load(); last != nil && last.scope == scope {
		return last.prefix
	}
	p := s.prefix + scopeHash(scope) + ":"
	s.lastScope.Store(&scopedPrefix{scope, p})
	return p
}

// fail translates a client error. A context that ended wins: the caller
// gets an error matching ctx.Err(), even when go-redis reports a network
// timeout. An OOM reply (maxmemory reached under a noeviction policy, also
// from a script's first write, which then wrote nothing) means the store
// is full: [retrysafe.Full]. Everything else, including other server
// errors and script errors, means the store failed.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("retrysafe/redis: %s: %w (%v)", op, cerr, err)
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "OOM ") {
		return retrysafe.Full(op, err)
	}
	return retrysafe.Unavailable(op, err)
}

// globEscape escapes s for a SCAN MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
