package retrysafe

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe/internal/httpmethod"
	"github.com/retrysafe/retrysafe/internal/storeheader"
)

// InFlightMode says what a duplicate gets while the original is processing.
type InFlightMode string

const (
	// InFlightConflict answers 409 Conflict with Retry-After at once.
	InFlightConflict InFlightMode = "conflict"
	// InFlightWait waits (up to WaitTimeout) for the original to finish and
	// replays its result; on timeout it answers 409 like InFlightConflict.
	// It never waits on, nor takes over, an attempt whose outcome is
	// unknown: that gets 409 outcome-unknown (see [InProgressError]).
	InFlightWait InFlightMode = "wait"
)

// UnknownPolicy says what becomes of a retry that finds an attempt whose
// outcome is unknown: a processing record of the same request whose lease
// ran out (its owner crashed, or gave up: [Operation.Abandon]).
type UnknownPolicy string

const (
	// OnUnknownTakeover takes the record over and runs the operation again
	// (Attempt+1; the operation may resume from [Operation.Resumed]). The
	// default, and the behaviour before policies existed.
	OnUnknownTakeover UnknownPolicy = "takeover"
	// OnUnknownBlock never re-runs it: every retry gets 409
	// outcome-unknown until someone resolves the record (a [Resolver], the
	// completer [Executor.ResolveStranded], an operator's `retrysafe keys
	// resolve`).
	OnUnknownBlock UnknownPolicy = "block"
)

// Defaults applied to zero Config fields, and the fixed limits.
const (
	DefaultTTL             = 24 * time.Hour
	DefaultLease           = 30 * time.Second
	DefaultWaitTimeout     = 10 * time.Second
	DefaultMaxBody         = 1 << 20 // 1 MiB
	DefaultMaxResponseBody = 8 << 20 // 8 MiB
	DefaultStoreTimeout    = 5 * time.Second
	DefaultResolveTimeout  = 5 * time.Second
	DefaultProblemBase     = "https://retrysafe.dev/problems/"

	// MaxKeyLength is the longest Idempotency-Key accepted, in characters.
	MaxKeyLength = 255
	// MaxCheckpointData is the largest Checkpoint.Data an operation
	// records, in bytes: the engine refuses a larger one before calling
	// the store. A store must accept CheckpointStoreLimit bytes, which
	// leaves room for a wrapper's own overhead (store/sealed encrypts the
	// data) and for the completer's not-done mark, which keeps the
	// attempt's checkpoint with its name (see [Record.ResolvedNotDone]).
	MaxCheckpointData = 64 << 10
	// CheckpointStoreLimit is the largest Checkpoint.Data every store must
	// accept, in bytes: MaxCheckpointData plus 1 KiB for wrappers
	// (store/sealed adds a key id, a nonce and a tag). A MySQL column for
	// it must be a MEDIUMBLOB: a BLOB holds 65,535 bytes.
	CheckpointStoreLimit = MaxCheckpointData + 1<<10
	// MaxCheckpointName is the longest checkpoint name, in bytes.
	MaxCheckpointName = 64
	// FirstSentSkew is how far in the future a Repeatability-First-Sent
	// time may be (the client's clock ahead of ours) before the request is
	// refused with 412 first-sent-expired.
	FirstSentSkew = 5 * time.Minute
)

// Config is the policy of the middleware. Zero values mean the documented
// defaults; [NewMiddleware] validates it.
type Config struct {
	// Store holds the records. Required.
	Store Store

	// Methods are the protected methods; nil means POST and PATCH. Other
	// methods pass through untouched. Methods match ASCII
	// case-insensitively, so "patch" is protected like "PATCH" (and
	// "poſt" is not "POST").
	Methods []string
	// RequireKey makes a protected request without Idempotency-Key fail
	// with 400. When false such requests pass through unprotected.
	RequireKey bool
	// Key takes the key from somewhere other than the Idempotency-Key
	// header: another header ([KeyFromHeader]) or a member of the JSON
	// body ([KeyFromJSON]), such as a webhook's event id. The body is
	// then read (within MaxBody) before the key. Nil reads Idempotency-Key
	// or, without it, the OASIS Repeatability-Request-ID (with
	// Repeatability-First-Sent; see docs/gateway.md).
	Key KeyFunc

	// TTL is how long a completed record is replayed (default 24h).
	TTL time.Duration
	// Lease is how long a claim holds without a heartbeat (default 30s).
	// While the handler runs, the lease is renewed every Lease/3, so a
	// crashed process blocks its key for at most one Lease.
	Lease time.Duration

	// InFlight chooses conflict (409, default) or wait for duplicates that
	// arrive while the original is processing.
	InFlight InFlightMode
	// WaitTimeout bounds waiting in InFlightWait mode (default 10s).
	WaitTimeout time.Duration

	// MaxBody is the largest request body accepted, in bytes (default
	// 1 MiB). Larger bodies get 413 and nothing runs.
	MaxBody int64
	// MaxResponseBody is the largest response body stored (default 8 MiB).
	// A larger response still reaches the first caller in full, but the
	// record stores a 502 problem response ("response-not-stored") instead:
	// the operation ran and never runs again for this key.
	MaxResponseBody int64

	// StoreTimeout bounds every store call (default 5s).
	StoreTimeout time.Duration
	// FailOpen runs requests unprotected when the store is unavailable
	// (its error matches ErrStoreUnavailable); any other store error still
	// answers 503, and a full store (ErrStoreFull) always answers 503
	// store-full. The default (false) answers 503 with Retry-After and
	// runs nothing.
	FailOpen bool

	// OnUnknown is the policy for an attempt whose outcome is unknown:
	// [OnUnknownTakeover] (default) or [OnUnknownBlock]. With a Resolver
	// the engine never takes such a record over on its own: it asks the
	// Resolver, whatever OnUnknown says.
	OnUnknown UnknownPolicy
	// Resolver, when set, decides about an attempt whose outcome is
	// unknown before any takeover: re-run it, complete it with a response
	// (which every retry then gets), or keep it blocked. See [Resolver].
	Resolver Resolver
	// ResolveTimeout bounds one Resolver call (default 5s). A Resolver
	// that takes longer, fails or panics keeps the record blocked.
	ResolveTimeout time.Duration

	// StoreStatus reports whether a response with this status is stored and
	// replayed. For a status where it returns false the key is released, so
	// a retry runs the operation again. Nil stores every status (Stripe's
	// behaviour, and the safe default: a 500 may have had side effects).
	StoreStatus func(status int) bool
	// StoreHeader reports whether a response header is stored for replay.
	// Nil stores every header except hop-by-hop headers, Set-Cookie,
	// Content-Length (recomputed from the stored body), Date and
	// Idempotent-Replayed.
	StoreHeader func(name string) bool

	// Scope returns the caller's identity for a request; records are keyed
	// by scope + key so tenants never share keys. Nil means
	// [ScopeFromHeaders]("Authorization"); see also [ScopeFromCookie].
	// Derive it from
	// credentials the caller must hold (whole header or cookie values),
	// never from an unverified claim inside a token.
	Scope func(r *http.Request) (string, error)
	// RequireScope refuses a keyed request whose Scope is "" with 400
	// empty-scope, and nothing runs. Set it unless every caller is meant
	// to share one key space: without it, such requests all share the
	// empty scope, so a caller who reuses another's key and body gets the
	// other's stored answer (the gateway sets it unless
	// --allow-empty-scope). The default (false) keeps existing embeddings
	// working.
	RequireScope bool
	// ScopeSource says, in the empty-scope answer, what a caller sends to
	// be identified, such as "the Authorization header or the session
	// cookie". "" means "the Authorization header" when Scope is nil, and
	// a generic phrase otherwise.
	ScopeSource string
	// ErrorDialect is the shape of the problem answers the middleware
	// writes: [DialectProblem] (RFC 9457 only, the default) or
	// [DialectStripe], which adds Stripe's "error" member and
	// Stripe-Should-Retry so that Stripe's SDKs raise them as errors.
	ErrorDialect ErrorDialect
	// IgnoreFields are JSON Pointers (RFC 6901) of body fields left out of
	// the fingerprint, such as "/meta/requestedAt".
	IgnoreFields []string
	// FingerprintPath returns the path used in the fingerprint; nil means
	// r.URL.EscapedPath(), the path as the client escaped it, so that
	// "/orders/a%2Fb" and "/orders/a/b" (one path segment or two to the
	// upstream) are different requests.
	FingerprintPath func(r *http.Request) string
	// RouteName is stored with every record this middleware claims
	// (ClaimParams.Route), so operators can tell and filter which route a
	// record belongs to; the gateway sets it to the route's pattern, such
	// as "POST /payments". Empty by default.
	RouteName string

	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives warnings and errors; nil means slog.Default(). Key
	// values and bodies are only logged at debug level.
	Logger *slog.Logger
	// Observer receives metrics events; nil means none.
	Observer Observer
	// ProblemBase is the base URI of problem "type" members; nil string
	// means DefaultProblemBase. The documented types are listed in
	// docs/problems.md.
	ProblemBase string
}

// Header names and values used by retrysafe.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderStripeShouldRetry is the header by which Stripe's API tells
	// its SDKs whether to retry an answer ("true" or "false"), overriding
	// their status-based rule (retry 409 and 5xx).
	HeaderStripeShouldRetry = "Stripe-Should-Retry"
	// ContentTypeProblem is the media type of problem responses.
	ContentTypeProblem = "application/problem+json"

	// OASIS Repeatable Requests 1.0, as Azure's REST APIs use it: a client
	// names an operation with Repeatability-Request-ID (taken as the key
	// when there is no Idempotency-Key) and says when it first sent it with
	// Repeatability-First-Sent; answers say Repeatability-Result: accepted
	// (the request ran, or its stored result was replayed) or rejected.
	HeaderRepeatabilityRequestID = "Repeatability-Request-Id" // canonical form of Repeatability-Request-ID
	HeaderRepeatabilityFirstSent = "Repeatability-First-Sent"
	HeaderRepeatabilityResult    = "Repeatability-Result"
)

// WithDefaults returns c with every zero field set to its documented
// default, or the error [NewMiddleware] would return for c, naming the
// first invalid field. Code that wraps the middleware (the gateway, say)
// reads effective values such as the lease from it instead of restating
// the defaults.
func (c Config) WithDefaults() (Config, error) { return c.withDefaults() }

// withDefaults returns a copy of c with defaults applied, or an error naming
// the first invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.Store == nil {
		return c, errors.New("retrysafe: Config.Store is required")
	}
	if c.Methods == nil {
		c.Methods = httpmethod.Default
	}
	c.Methods = append([]string(nil), c.Methods...)
	for i, m := range c.Methods {
		if m == "" || strings.ContainsAny(m, " \t\r\n") {
			return c, fmt.Errorf("retrysafe: Config.Methods[%d] %q is not an HTTP method", i, m)
		}
		c.Methods[i] = httpmethod.Canonical(m)
	}
	var err error
	if c.TTL, err = durationOr("TTL", c.TTL, DefaultTTL); err != nil {
		return c, err
	}
	if c.Lease, err = durationOr("Lease", c.Lease, DefaultLease); err != nil {
		return c, err
	}
	if c.WaitTimeout, err = durationOr("WaitTimeout", c.WaitTimeout, DefaultWaitTimeout); err != nil {
		return c, err
	}
	if c.StoreTimeout, err = durationOr("StoreTimeout", c.StoreTimeout, DefaultStoreTimeout); err != nil {
		return c, err
	}
	if c.ResolveTimeout, err = durationOr("ResolveTimeout", c.ResolveTimeout, DefaultResolveTimeout); err != nil {
		return c, err
	}
	switch c.OnUnknown {
	case "":
		c.OnUnknown = OnUnknownTakeover
	case OnUnknownTakeover, OnUnknownBlock:
	default:
		return c, fmt.Errorf("retrysafe: Config.OnUnknown %q is not %q or %q", c.OnUnknown, OnUnknownTakeover, OnUnknownBlock)
	}
	if c.Lease < 10*time.Millisecond {
		return c, fmt.Errorf("retrysafe: Config.Lease %s is too short (minimum 10ms)", c.Lease)
	}
	switch c.InFlight {
	case "":
		c.InFlight = InFlightConflict
	case InFlightConflict, InFlightWait:
	default:
		return c, fmt.Errorf("retrysafe: Config.InFlight %q is not %q or %q", c.InFlight, InFlightConflict, InFlightWait)
	}
	if c.MaxBody, err = sizeOr("MaxBody", c.MaxBody, DefaultMaxBody); err != nil {
		return c, err
	}
	if c.MaxResponseBody, err = sizeOr("MaxResponseBody", c.MaxResponseBody, DefaultMaxResponseBody); err != nil {
		return c, err
	}
	for i, p := range c.IgnoreFields {
		if p == "" {
			return c, fmt.Errorf("retrysafe: Config.IgnoreFields[%d] is the empty pointer (the whole body); name a field such as /meta/requestedAt", i)
		}
		if err := validatePointer(p); err != nil {
			return c, fmt.Errorf("retrysafe: Config.IgnoreFields[%d]: %w", i, err)
		}
	}
	if c.StoreStatus == nil {
		c.StoreStatus = func(int) bool { return true }
	}
	if c.StoreHeader == nil {
		c.StoreHeader = storeheader.Default
	}
	if c.Scope == nil {
		c.Scope = ScopeFromHeaders("Authorization")
		if c.ScopeSource == "" {
			c.ScopeSource = "the Authorization header"
		}
	}
	switch c.ErrorDialect {
	case "":
		c.ErrorDialect = DialectProblem
	case DialectProblem, DialectStripe:
	default:
		return c, fmt.Errorf("retrysafe: Config.ErrorDialect %q is not %q or %q", c.ErrorDialect, DialectProblem, DialectStripe)
	}
	if c.FingerprintPath == nil {
		c.FingerprintPath = func(r *http.Request) string { return r.URL.EscapedPath() }
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	if c.ProblemBase == "" {
		c.ProblemBase = DefaultProblemBase
	}
	return c, nil
}

func durationOr(field string, d, def time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("retrysafe: Config.%s must not be negative (got %s)", field, d)
	case d == 0:
		return def, nil
	}
	return d, nil
}

func sizeOr(field string, n, def int64) (int64, error) {
	switch {
	case n < 0:
		return 0, fmt.Errorf("retrysafe: Config.%s must not be negative (got %d)", field, n)
	case n == 0:
		return def, nil
	}
	return n, nil
}
