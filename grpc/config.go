package retrysafegrpc

import (
	"context"
	"errors"
	"strings"

	"github.com/retrysafe/retrysafe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Config is the policy of the server interceptors. Zero values mean the
// documented defaults; [New] validates it.
type Config struct {
	// Retrysafe configures the engine, as for [retrysafe.NewExecutor]:
	// Store (required), TTL, Lease, InFlight, WaitTimeout, StoreTimeout,
	// OnUnknown, Resolver, ResolveTimeout, RouteName, Now, Logger and
	// Observer. Its HTTP fields (Methods, Scope, StoreStatus, MaxBody and
	// the like) are not used: the fields below take their place.
	Retrysafe retrysafe.Config

	// Protect reports whether calls to fullMethod (such as
	// "/payments.v1.Payments/Charge") are protected. Nil protects every
	// method except those of the health (grpc.health.v1) and reflection
	// (grpc.reflection.*) services, which pass untouched. A call to a
	// method it leaves out passes untouched too.
	Protect func(fullMethod string) bool
	// RequireKey refuses a protected unary call without the
	// idempotency-key metadata with InvalidArgument (reason MISSING_KEY).
	// When false such calls run unprotected.
	RequireKey bool

	// Scope returns the caller's identity for a call, from the server's
	// view of it (the authenticated peer, a verified token's subject):
	// records are keyed by scope + key, so callers never share keys. Nil
	// means [ScopeFromPeerCertificate]. It never comes from client
	// metadata unless you say so ([ScopeFromMetadata]). An error refuses
	// the call with its status (Unauthenticated if it has none).
	Scope func(ctx context.Context) (string, error)
	// RequireScope refuses a keyed call whose scope is "" with
	// Unauthenticated (reason EMPTY_SCOPE), and nothing runs. Without it,
	// such calls share the empty scope.
	RequireScope bool

	// StoreCode reports whether a result with this code is stored and
	// replayed. For a code where it returns false the key is released, so
	// a retry runs the method again. Nil is [DefaultStoreCode].
	StoreCode func(codes.Code) bool
	// MaxResponseSize is the largest encoded response message stored, in
	// bytes (default retrysafe.DefaultMaxResponseBody, 8 MiB). A larger
	// one still reaches the first caller, but the record stores Internal
	// (reason RESPONSE_NOT_STORED) instead: the method ran and never runs
	// again for this key.
	MaxResponseSize int

	// FailOpen runs calls unprotected when the store is unavailable (its
	// error matches retrysafe.ErrStoreUnavailable). The default answers
	// Unavailable and runs nothing. A full store never fails open.
	FailOpen bool
}

// DefaultStoreCode is the default of Config.StoreCode, the HTTP
// middleware's rule in gRPC terms: every result is stored (a failed call
// may have had effects, and answers the same to its retries) except
// Unavailable, DeadlineExceeded and Canceled, the codes by which a method
// says that nothing ran and a retry may run it. A method that fails with
// one of them after an effect it cannot undo should answer another code,
// or call [retrysafe.Operation.Abandon] (see [retrysafe.OperationFromContext]).
func DefaultStoreCode(c codes.Code) bool {
	return c != codes.Unavailable && c != codes.DeadlineExceeded && c != codes.Canceled
}

// Unprotected reports whether fullMethod belongs to the health or the
// reflection service, which the default Config.Protect (and the client
// interceptor) leave alone.
func Unprotected(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.") || strings.HasPrefix(fullMethod, "/grpc.reflection.")
}

func defaultProtect(fullMethod string) bool { return !Unprotected(fullMethod) }

// ScopeFromPeerCertificate is the default Config.Scope: the SHA-256 of
// the client's TLS certificate (the leaf of the verified chain under
// mutual TLS), or "" when the call came without one.
func ScopeFromPeerCertificate(ctx context.Context) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return "", nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return "", nil
	}
	return retrysafe.HashScope(string(ti.State.PeerCertificates[0].Raw)), nil
}

// ScopeFromMetadata returns a Scope function that identifies the caller
// by the SHA-256 of the values of an incoming metadata key, such as
// "authorization" (joined with "\n"; "" when absent), so the credential
// itself is never stored. Use it only for metadata the server verifies
// (a bearer token its auth interceptor checked): the caller chooses
// whatever it sends.
func ScopeFromMetadata(key string) func(ctx context.Context) (string, error) {
	key = strings.ToLower(key)
	return func(ctx context.Context) (string, error) {
		vs := metadata.ValueFromIncomingContext(ctx, key)
		empty := true
		for _, v := range vs {
			empty = empty && v == ""
		}
		if empty {
			return "", nil
		}
		return retrysafe.HashScope(strings.Join(vs, "\n")), nil
	}
}

// withDefaults returns c with defaults applied, or an error naming the
// first invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.Protect == nil {
		c.Protect = defaultProtect
	}
	if c.Scope == nil {
		c.Scope = ScopeFromPeerCertificate
	}
	if c.StoreCode == nil {
		c.StoreCode = DefaultStoreCode
	}
	switch {
	case c.MaxResponseSize < 0:
		return c, errors.New("retrysafegrpc: Config.MaxResponseSize must not be negative")
	case c.MaxResponseSize == 0:
		c.MaxResponseSize = retrysafe.DefaultMaxResponseBody
	}
	var err error
	c.Retrysafe, err = c.Retrysafe.WithDefaults()
	return c, err
}
