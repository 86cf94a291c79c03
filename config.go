package retrysafe

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
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

// Defaults applied to zero Config fields.
const (
	DefaultTTL             = 24 * time.Hour
	DefaultLease           = 30 * time.Second
	DefaultWaitTimeout     = 10 * time.Second
	DefaultMaxBody         = 1 << 20 // 1 MiB
	DefaultMaxResponseBody = 8 << 20 // 8 MiB
	DefaultStoreTimeout    = 5 * time.Second
	DefaultResolveTimeout  = 5 * time.Second
	DefaultProblemBase     = "https://retrysafe.dev/problems/"
)

// Config is the policy of the middleware. Zero values mean the documented
// defaults; [NewMiddleware] validates it.
type Config struct {
	// Store holds the records. Required.
	Store Store

	// Methods are the protected methods; nil means POST and PATCH. Other
	// methods pass through untouched. Methods match ASCII
	// case-insensitively (see [MethodProtected]), so "patch" is protected
	// like "PATCH".
	Methods []string
	// RequireKey makes a protected request without Idempotency-Key fail
	// with 400. When false such requests pass through unprotected.
	RequireKey bool

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
	// Nil stores every header except hop-by-hop headers, Set-Cookie and
	// Content-Length (see [DefaultStoreHeader]).
	StoreHeader func(name string) bool

	// Scope returns the caller's identity for a request; records are keyed
	// by scope + key so tenants never share keys. Nil means
	// [ScopeFromHeader]("Authorization"); see also [ScopeFromHeaders],
	// [ScopeFromCookie] and [ScopeFromHeadersAndCookie]. Derive it from
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

// CanonicalMethod returns method with its ASCII letters upper-cased. It is
// the one rule by which retrysafe compares methods: [MethodProtected] (used
// by the middleware and the gateway) and [Fingerprint] both apply it, so
// "patch" is protected like "PATCH" and a retry that changes only the case
// of its method is the same request. Non-ASCII bytes are left as they are
// (they are not valid in a method, and Unicode case mapping would equate
// "poſt" with "POST").
func CanonicalMethod(method string) string {
	for i := 0; i < len(method); i++ {
		if c := method[i]; 'a' <= c && c <= 'z' {
			b := []byte(method)
			for j := i; j < len(b); j++ {
				if 'a' <= b[j] && b[j] <= 'z' {
					b[j] -= 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return method
}

// MethodProtected reports whether method is one of methods under
// [CanonicalMethod], that is, comparing ASCII case-insensitively. Nil
// methods means the default, POST and PATCH.
func MethodProtected(methods []string, method string) bool {
	if methods == nil {
		methods = defaultMethods
	}
	for _, m := range methods {
		if equalFoldASCII(m, method) {
			return true
		}
	}
	return false
}

var defaultMethods = []string{http.MethodPost, http.MethodPatch}

// equalFoldASCII reports whether a and b are equal when ASCII letters are
// upper-cased.
func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// ScopeFromHeader returns a Scope function that identifies the caller by the
// SHA-256 of a request header's value (so the credential itself is never
// stored); several fields of the header are joined with "\n". A request
// without the header, or with only empty values, has the empty scope,
// which the middleware refuses when Config.RequireScope is set.
func ScopeFromHeader(name string) func(*http.Request) (string, error) {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := r.Header[name] // as Header.Values: name is canonical
		if allEmpty(v) {
			return "", nil
		}
		return HashScope(strings.Join(v, "\n")), nil
	}
}

// HashScope returns the hex SHA-256 of an identity value; use it to build
// scopes from secrets such as API keys.
func HashScope(identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return hex.EncodeToString(sum[:])
}

// unstoredHeaders are the names DefaultStoreHeader drops, in canonical
// form: the hop-by-hop headers, Set-Cookie, Content-Length, the replay
// marker and Date.
var unstoredHeaders = [...]string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Set-Cookie", "Content-Length", HeaderReplayed, "Date",
}

// DefaultStoreHeader is the default header filter: it keeps every header but
// hop-by-hop ones, Set-Cookie (a session must not be replayed to whoever
// retries) and Content-Length (recomputed from the stored body), and the
// replay marker itself.
func DefaultStoreHeader(name string) bool {
	// http.CanonicalHeaderKey(name) equals one of these canonical names
	// exactly when name equals it but for ASCII case (the names are valid
	// field names, so such a name is canonicalised, and any other one is
	// not changed into it): compared that way, without canonicalising
	// name or a map look-up, for every field of every stored response.
	for _, u := range unstoredHeaders {
		if equalFoldASCII(name, u) {
			return false
		}
	}
	return true
}

// Header names used by retrysafe.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
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
		c.Methods = defaultMethods
	}
	c.Methods = append([]string(nil), c.Methods...)
	for i, m := range c.Methods {
		if m == "" || strings.ContainsAny(m, " \t\r\n") {
			return c, fmt.Errorf("retrysafe: Config.Methods[%d] %q is not an HTTP method", i, m)
		}
		c.Methods[i] = CanonicalMethod(m)
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
		if err := ValidatePointer(p); err != nil {
			return c, fmt.Errorf("retrysafe: Config.IgnoreFields[%d]: %w", i, err)
		}
	}
	if c.StoreStatus == nil {
		c.StoreStatus = func(int) bool { return true }
	}
	if c.StoreHeader == nil {
		c.StoreHeader = DefaultStoreHeader
	}
	if c.Scope == nil {
		c.Scope = ScopeFromHeader("Authorization")
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
