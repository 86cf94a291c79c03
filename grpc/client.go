package retrysafegrpc

import (
	"context"
	"github.com/retrysafe/retrysafe/internal/keyquote"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ClientConfig is the policy of the client interceptor. The zero value
// is the default.
type ClientConfig struct {
	// Protect reports whether calls to fullMethod get a key. Nil is
	// [DefaultProtect]: every method except those of the health and
	// reflection services and those marked NO_SIDE_EFFECTS.
	Protect func(fullMethod string) bool
}

// UnaryClientInterceptor returns the interceptor that sends an
// idempotency-key with every unary call to a protected method: the key
// pinned to the call's context ([WithKey], [WithNewKey],
// [WithDerivedKey]), or else a new random one ([NewKey]) for this call.
// A call whose outgoing metadata already holds an idempotency-key keeps
// it.
//
// grpc-go runs it once per logical call, before its own retries (a
// service config's retryPolicy, transparent retries), which re-send the
// same metadata: every attempt of the call carries the same key. A caller
// that retries by itself makes a new call each time; to send the same key
// on each, pin one to the context first:
//
//	ctx = retrysafegrpc.WithNewKey(ctx)
//	for attempt := 0; ; attempt++ {
//		reply, err := c.Charge(ctx, req) // the same key every time
//		...
//	}
func UnaryClientInterceptor(cfg ClientConfig) grpc.UnaryClientInterceptor {
	protect := cfg.Protect
	if protect == nil {
		protect = DefaultProtect
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !protect(method) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(MetadataKey)) > 0 {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		value := NewKey() // a UUID: valid bare
		if key := KeyFromContext(ctx); key != "" {
			var err error
			if value, err = encodeKey(key); err != nil {
				return status.Errorf(codes.InvalidArgument, "retrysafegrpc: the key pinned to the context is invalid: %v", err)
			}
		}
		ctx = metadata.AppendToOutgoingContext(ctx, MetadataKey, value)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

type keyContextKey struct{}

// WithKey returns a copy of ctx that makes the client interceptor send
// key with every protected call made with it. key is the key itself (at
// most 255 printable ASCII characters), sent bare when it can be and as a
// quoted string otherwise, which servers decode back to key. An empty key
// is ignored.
//
// Use one such context per logical operation: every call made with it,
// the caller's own retries included, carries the same key.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyContextKey{}, key)
}

// WithNewKey is WithKey(ctx, NewKey()).
func WithNewKey(ctx context.Context) context.Context { return WithKey(ctx, NewKey()) }

// KeyFromContext returns the key pinned to ctx, or "".
func KeyFromContext(ctx context.Context) string {
	k, _ := ctx.Value(keyContextKey{}).(string)
	return k
}

// NewKey returns a new random key, as [client.NewKey]: a version 4 UUID.
func NewKey() string { return client.NewKey() }

// DeriveKey returns the stable key for an outbound call that the
// operation in ctx makes (a handler behind the server interceptor, or any
// other retrysafe operation), named label, as [client.DeriveKey]: when the
// incoming call is retried, the outbound call is retried with the same
// key. ok is false when ctx carries no operation.
func DeriveKey(ctx context.Context, label string) (key string, ok bool) {
	return client.DeriveKey(ctx, label)
}

// WithDerivedKey returns a copy of ctx that makes the client interceptor
// send the key [DeriveKey] derives for label. When ctx carries no
// operation it returns ctx unchanged (a random key is sent). To derive
// with a secret, pin the key of [client.DeriveKeyWithSecret] with
// [WithKey].
func WithDerivedKey(ctx context.Context, label string) context.Context {
	key, ok := DeriveKey(ctx, label)
	if !ok {
		return ctx
	}
	return WithKey(ctx, key)
}

// Replayed reports whether header, a call's header metadata (from
// grpc.Header), marks a replayed answer.
func Replayed(header metadata.MD) bool {
	v := header.Get(MetadataReplayed)
	return len(v) > 0 && v[0] == "true"
}

// encodeKey returns the metadata value that sends key: key itself when it
// reads back as key, else key as a quoted string.
func encodeKey(key string) (string, error) {
	if k, err := retrysafe.ParseKey(key); err == nil && k == key {
		return key, nil
	}
	v := keyquote.Quote(key)
	if _, err := retrysafe.ParseKey(v); err != nil {
		return "", err
	}
	return v, nil
}
