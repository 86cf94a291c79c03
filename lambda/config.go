package retrysafelambda

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/canonicaljson"
)

// Defaults applied to zero Config fields.
const (
	// DefaultDeadlineGrace is how long past the invocation's deadline a
	// lease may last: Lambda stops a function that timed out slightly
	// after its deadline (a fraction of a second has been observed), and
	// a record must not look abandoned while its owner still runs.
	DefaultDeadlineGrace = 2 * time.Second
	// MaxCachedResult is the largest stored result, in bytes, that the
	// local cache keeps; larger ones are always read from the store.
	MaxCachedResult = 64 << 10
)

// Errors of the wrapper. Match them with errors.Is.
var (
	// ErrNoTimeLeft: the invocation's deadline had already passed when it
	// started (or, past the deadline plus Config.DeadlineGrace, when it
	// was to claim after waiting for a duplicate), so nothing was claimed
	// or run (Lambda is about to stop the function); the retry finds the
	// key as it was.
	ErrNoTimeLeft = errors.New("retrysafe/lambda: the invocation's deadline has passed; nothing ran")
	// ErrNoKey: Config.RequireKey is set and the event carries no
	// idempotency key where Config.Key points; nothing ran.
	ErrNoKey = errors.New("retrysafe/lambda: the event carries no idempotency key")
	// ErrBadPayload: Config.Validate names members of a payload that is
	// not JSON; nothing ran (400 bad-request-body for API Gateway).
	ErrBadPayload = errors.New("retrysafe/lambda: the payload is not JSON")
)

// Config is the policy of a wrapped handler. Zero values mean the
// documented defaults; the constructors ([Func], [SQS], [APIGateway],
// [HTTPAPI]) validate it.
type Config struct {
	// Store holds the records: any retrysafe.Store (store/memory for
	// tests, store/sqlite, store/postgres, store/redis, store/mysql, or
	// store/dynamodb). Required.
	Store retrysafe.Store
	// Scope separates key spaces: records are keyed by Scope and key, so
	// that two functions sharing a table never answer each other's
	// events. Empty means the function's name (AWS_LAMBDA_FUNCTION_NAME,
	// as lambdacontext.FunctionName reads it; empty outside Lambda), as
	// Powertools prefixes its keys. For API Gateway events the caller's
	// identity (a hash of the Authorization header) is added to it.
	Scope string

	// Key is a JSON Pointer (RFC 6901), such as "/orderId", to the
	// idempotency key: in the event for [Func], in the message body for
	// [SQS], in the request body for [APIGateway] and [HTTPAPI]. The
	// member must be a string or an integer. Empty means: the SHA-256 of
	// the whole canonical event ([Func]), the message's messageId ([SQS]),
	// the Idempotency-Key header ([APIGateway], [HTTPAPI]).
	Key string
	// RequireKey refuses an event that carries no key at Key with
	// [ErrNoKey] (a 400 problem for API Gateway). When false, such an
	// event runs unprotected, and a warning is logged.
	RequireKey bool
	// Validate are JSON Pointers of the payload's members (event, message
	// body, request body) that the fingerprint covers, such as
	// []string{"/amount", "/currency"}: the same key with other values of
	// these members fails with retrysafe.ErrMismatch (422 for API Gateway)
	// and nothing runs. Nil covers the whole payload, as canonical JSON
	// (key order and whitespace do not matter); list the members when the
	// payload carries something that changes between retries, such as a
	// timestamp. API Gateway fingerprints always cover the method, path
	// and query too.
	Validate []string

	// TTL is how long a completed result is replayed (default 24h).
	TTL time.Duration
	// Lease is the longest an invocation's claim holds without renewal
	// (default 30s); it is renewed every Lease/3 while the handler runs.
	// When the invocation has a deadline, the lease never runs past the
	// deadline plus DeadlineGrace: an invocation that Lambda stops at its
	// timeout frees its key right after.
	Lease time.Duration
	// DeadlineGrace is how long past the deadline the lease may run
	// (default DefaultDeadlineGrace).
	DeadlineGrace time.Duration

	// InFlight is what a duplicate gets while the original runs:
	// retrysafe.InFlightWait (the default) waits for the original's
	// result, up to WaitTimeout and never more than half the invocation's
	// remaining time; retrysafe.InFlightConflict fails at once with a
	// *retrysafe.InProgressError (409 for API Gateway).
	InFlight     retrysafe.InFlightMode
	WaitTimeout  time.Duration
	StoreTimeout time.Duration

	// Permanent reports whether a handler's error is stored, so that
	// every retry gets it back (as a *retrysafe.FailedError) without
	// running the handler again. Nil stores only errors marked with
	// retrysafe.Permanent. Any other error releases the key: the retry
	// runs the handler again. An error returned once the invocation's
	// context has ended (its deadline passed) is neither: the outcome is
	// unknown, and the record is abandoned (see OnUnknown).
	Permanent func(error) bool
	// StoreStatus reports whether an API Gateway response with this
	// status is stored and replayed; for other statuses the key is
	// released. Nil stores every status.
	StoreStatus func(status int) bool
	// Methods are the HTTP methods protected for API Gateway events; nil
	// means POST and PATCH. Other methods pass through.
	Methods []string

	// OnUnknown, Resolver and ResolveTimeout decide what a retry does
	// with an attempt whose outcome is unknown (it timed out, or its
	// environment died): take it over (the default; the handler sees
	// retrysafe.Operation.Attempt() > 1) or stay blocked until a Resolver
	// decides. See retrysafe.Config.
	OnUnknown      retrysafe.UnknownPolicy
	Resolver       retrysafe.Resolver
	ResolveTimeout time.Duration

	// CacheSize, when positive, keeps up to that many completed results
	// (each at most MaxCachedResult bytes) in memory, per wrapped handler
	// and so per execution environment, least recently used first out:
	// a duplicate that finds its result there is answered without a store
	// call, until the record's expiry. Zero disables the cache.
	CacheSize int

	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives warnings; nil means slog.Default(). Keys are never
	// logged above debug level.
	Logger *slog.Logger
	// Observer receives metrics events (see retrysafe.Observer).
	Observer retrysafe.Observer
}

// wrapper is a validated Config, shared by every invocation of one
// wrapped handler.
type wrapper struct {
	cfg      Config
	key      retrysafe.KeyFunc // nil when Config.Key is empty
	validate [][]string        // Config.Validate, decoded
	methods  map[string]bool
	cache    *cache // nil without Config.CacheSize
}

func newWrapper(cfg Config) (*wrapper, error) {
	if cfg.Store == nil {
		return nil, errors.New("retrysafe/lambda: Config.Store is required")
	}
	if cfg.DeadlineGrace < 0 || cfg.CacheSize < 0 {
		return nil, errors.New("retrysafe/lambda: Config.DeadlineGrace and Config.CacheSize must not be negative")
	}
	if cfg.DeadlineGrace == 0 {
		cfg.DeadlineGrace = DefaultDeadlineGrace
	}
	if cfg.Scope == "" {
		cfg.Scope = lambdacontext.FunctionName
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Permanent == nil {
		cfg.Permanent = retrysafe.IsPermanent
	}
	if cfg.InFlight == "" {
		cfg.InFlight = retrysafe.InFlightWait
	}
	// The engine's own defaults and checks, once: every invocation makes
	// a Doer of its own from these values.
	dc := cfg.doConfig(cfg.Store, cfg.Scope, cfg.Lease, cfg.WaitTimeout)
	if _, err := retrysafe.NewDoer(dc); err != nil {
		return nil, fmt.Errorf("retrysafe/lambda: %w", err)
	}
	full, err := retrysafe.Config{
		Store: cfg.Store, TTL: cfg.TTL, Lease: cfg.Lease, WaitTimeout: cfg.WaitTimeout, StoreTimeout: cfg.StoreTimeout,
	}.WithDefaults()
	if err != nil {
		return nil, fmt.Errorf("retrysafe/lambda: %w", err)
	}
	cfg.TTL, cfg.Lease, cfg.WaitTimeout, cfg.StoreTimeout = full.TTL, full.Lease, full.WaitTimeout, full.StoreTimeout

	w := &wrapper{cfg: cfg, methods: map[string]bool{}}
	if cfg.Key != "" {
		if w.key, err = retrysafe.KeyFromJSON(cfg.Key); err != nil {
			return nil, fmt.Errorf("retrysafe/lambda: Config.Key: %w", err)
		}
	}
	for _, p := range cfg.Validate {
		if p == "" {
			return nil, errors.New(`retrysafe/lambda: Config.Validate: the empty pointer is the whole payload, which nil Validate covers already`)
		}
		if err := canonicaljson.ValidatePointer(p); err != nil {
			return nil, fmt.Errorf("retrysafe/lambda: Config.Validate: %w", err)
		}
		w.validate = append(w.validate, pointerTokens(p))
	}
	methods := cfg.Methods
	if methods == nil {
		methods = []string{http.MethodPost, http.MethodPatch}
	}
	for _, m := range methods {
		w.methods[asciiUpper(m)] = true
	}
	if cfg.CacheSize > 0 {
		w.cache = newCache(cfg.CacheSize)
	}
	return w, nil
}

// doConfig is the DoConfig of one invocation on store, with its own
// lease and wait timeout.
func (c *Config) doConfig(store retrysafe.Store, scope string, lease, wait time.Duration) retrysafe.DoConfig {
	return retrysafe.DoConfig{
		Store: store, Scope: scope,
		TTL: c.TTL, Lease: lease, InFlight: c.InFlight, WaitTimeout: wait, StoreTimeout: c.StoreTimeout,
		OnUnknown: c.OnUnknown, Resolver: c.Resolver, ResolveTimeout: c.ResolveTimeout,
		Now: c.Now, Logger: c.Logger, Observer: c.Observer,
	}
}

func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
	return string(b)
}

// dummyRequest is what the key function of retrysafe.KeyFromJSON, which
// reads only the body it is given, gets for a request: an event has none.
var dummyRequest = &http.Request{}

// eventKey reads the key from payload with Config.Key; ok is false when it
// has none.
func (w *wrapper) eventKey(payload []byte) (key string, ok bool, err error) {
	return w.key(dummyRequest, payload)
}

// noKey is what an event without a key gets: ErrNoKey under RequireKey,
// otherwise a warning (the handler then runs unprotected).
func (w *wrapper) noKey(ctx context.Context, kind string) error {
	if w.cfg.RequireKey {
		return ErrNoKey
	}
	w.cfg.Logger.WarnContext(ctx, "retrysafe/lambda: event without an idempotency key runs unprotected", "event", kind, "pointer", w.cfg.Key)
	return nil
}
