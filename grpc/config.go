package retrysafegrpc

import (
	"context"
	"errors"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"strings"
	"sync"

	"github.com/retrysafe/retrysafe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
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
	// "/payments.v1.Payments/Charge") are protected. Nil is
	// [DefaultProtect]: every method except those of the health and
	// reflection services and those whose .proto marks them
	// NO_SIDE_EFFECTS (as HTTP's GET passes the middleware). A call to a
	// method it leaves out passes untouched.
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

// DefaultProtect is the default of Config.Protect and ClientConfig.Protect:
// false for the health and reflection services ([Unprotected]) and for
// methods declared with option idempotency_level = NO_SIDE_EFFECTS in a
// file of protoregistry.GlobalFiles (generated code registers its files
// there), true for every other method.
func DefaultProtect(fullMethod string) bool {
	return !Unprotected(fullMethod) && !noSideEffects(fullMethod)
}

// sideEffectFree caches noSideEffects by method.
var sideEffectFree sync.Map // full method name → bool

// noSideEffects reports whether the registered descriptor of fullMethod
// ("/pkg.Service/Method") says it has no side effects.
func noSideEffects(fullMethod string) bool {
	if v, ok := sideEffectFree.Load(fullMethod); ok {
		return v.(bool)
	}
	free := false
	svc, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if ok {
		if d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc)); err == nil {
			if sd, ok := d.(protoreflect.ServiceDescriptor); ok {
				if md := sd.Methods().ByName(protoreflect.Name(method)); md != nil {
					opts, _ := md.Options().(*descriptorpb.MethodOptions)
					free = opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS
				}
			}
		}
	}
	sideEffectFree.Store(fullMethod, free)
	return free
}

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
	return scopehash.Sum(ti.State.PeerCertificates[0].Raw), nil
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
		return scopehash.Sum(strings.Join(vs, "\n")), nil
	}
}

// withDefaults returns c with defaults applied, or an error naming the
// first invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.Protect == nil {
		c.Protect = DefaultProtect
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
