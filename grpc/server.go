package retrysafegrpc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/retrysafe/retrysafe"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Interceptor holds the server interceptors of one [Config]. Make one
// with [New]; it is safe for concurrent use.
type Interceptor struct {
	cfg Config
	x   *retrysafe.Executor
}

// New validates cfg and returns its interceptors.
func New(cfg Config) (*Interceptor, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	x, err := retrysafe.NewExecutor(c.Retrysafe)
	if err != nil {
		return nil, err
	}
	return &Interceptor{cfg: c, x: x}, nil
}

// UnaryServerInterceptor returns the interceptor that runs each keyed
// unary call to a protected method at most once per scope and key, and
// answers every call with that key with the first call's result until the
// record expires:
//
//   - The key is the idempotency-key metadata, parsed like the HTTP
//     Idempotency-Key header ([retrysafe.ParseKey]). Several values or an
//     invalid one: InvalidArgument (INVALID_KEY), nothing runs. None: the
//     call runs unprotected, or, with Config.RequireKey,
//     InvalidArgument (MISSING_KEY).
//   - The fingerprint is the full method and the request's canonical
//     encoding ([Fingerprint]). The same key with another fingerprint:
//     FailedPrecondition (KEY_REUSED).
//   - The first call runs the handler on a context that the client's
//     cancellation and deadline do not reach (a client that hangs up does
//     not lose the result; bound the handler's work yourself); the
//     handler finds the operation with
//     [retrysafe.OperationFromContext]. Its result is stored, as
//     Config.StoreCode says: the response message's bytes, or the status
//     with its code, message and details, and the header and trailer
//     metadata it set.
//   - A call with a completed key gets that result: the same message
//     bytes, or the same status, and the same metadata, with
//     idempotent-replayed: true in the header metadata. The handler's
//     metadata goes out with the answer, on the first call too (its
//     grpc.SendHeader records the header rather than sending it early),
//     so that it never sees the call's transport fail when its client
//     has gone.
//   - While the first call runs: Aborted (REQUEST_IN_PROGRESS) with a
//     RetryInfo, or, with Retrysafe.InFlight wait, the result once it is
//     there. An attempt whose outcome is unknown: Aborted
//     (OUTCOME_UNKNOWN), RetryInfo the lease left. The store unreachable:
//     Unavailable (STORE_UNAVAILABLE), nothing runs, unless
//     Config.FailOpen.
//
// The answer is sent as the bytes stored, on the first call as on
// replays, so that every caller gets the same bytes: interceptors chained
// outside it (before it in grpc.ChainUnaryInterceptor) see the response
// as an opaque message holding them. Chain it last, so that interceptors
// that read or change the response message run inside it. It needs the
// protobuf codec (grpc-go's default): a keyed call in another content
// subtype (application/grpc+json, say) is refused with InvalidArgument
// (UNSUPPORTED_CODEC), since the opaque message would not encode in it.
func (i *Interceptor) UnaryServerInterceptor() grpc.UnaryServerInterceptor { return i.unary }

// StreamServerInterceptor returns the interceptor that refuses a keyed
// streaming call to a protected method with InvalidArgument
// (KEYED_STREAM): a stream's effects cannot be replayed, so a key on it
// would promise what the interceptor cannot keep. Unkeyed streams pass
// through, whatever Config.RequireKey says.
func (i *Interceptor) StreamServerInterceptor() grpc.StreamServerInterceptor { return i.stream }

func (i *Interceptor) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if i.cfg.Protect(info.FullMethod) && len(metadata.ValueFromIncomingContext(ss.Context(), MetadataKey)) > 0 {
		return refusal(codes.InvalidArgument, ReasonKeyedStream,
			"idempotency keys are supported on unary calls only; send this streaming call without idempotency-key", 0, nil)
	}
	return handler(srv, ss)
}

func (i *Interceptor) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !i.cfg.Protect(info.FullMethod) {
		return handler(ctx, req)
	}
	start := time.Now()
	vs := metadata.ValueFromIncomingContext(ctx, MetadataKey)
	if len(vs) == 0 {
		if i.cfg.RequireKey {
			i.observe(retrysafe.OutcomeMissingKey, start)
			return nil, refusal(codes.InvalidArgument, ReasonMissingKey, "this method requires an idempotency-key metadata value", 0, nil)
		}
		return handler(ctx, req)
	}
	if len(vs) > 1 {
		i.observe(retrysafe.OutcomeInvalidKey, start)
		return nil, refusal(codes.InvalidArgument, ReasonInvalidKey, fmt.Sprintf("idempotency-key has %d values; send exactly one", len(vs)), 0, nil)
	}
	key, err := retrysafe.ParseKey(vs[0])
	if err != nil {
		i.observe(retrysafe.OutcomeInvalidKey, start)
		return nil, refusal(codes.InvalidArgument, ReasonInvalidKey, err.Error(), 0, nil)
	}
	scope, err := i.cfg.Scope(ctx)
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	if scope == "" && i.cfg.RequireScope {
		i.observe(retrysafe.OutcomeEmptyScope, start)
		return nil, refusal(codes.Unauthenticated, ReasonEmptyScope, "a keyed call must identify its caller", 0, nil)
	}
	if st, ok := grpc.ServerTransportStreamFromContext(ctx).(interface{ ContentSubtype() string }); ok {
		if sub := st.ContentSubtype(); sub != "" && sub != "proto" {
			return nil, refusal(codes.InvalidArgument, ReasonUnsupportedCodec, fmt.Sprintf(
				"idempotency keys need the protobuf codec; this call uses %q: send it as application/grpc or application/grpc+proto", sub), 0, nil)
		}
	}
	msg, ok := message(req)
	if !ok {
		return nil, status.Errorf(codes.Internal, "retrysafegrpc: the request is a %T, not a protobuf message", req)
	}
	fp, err := Fingerprint(info.FullMethod, msg)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	var first *result // the first call's own answer, once the handler ran
	resp, replayed, err := i.x.Execute(ctx, scope, key, fp, func(octx context.Context) *retrysafe.Response {
		cs := &capturingStream{method: info.FullMethod}
		reply, herr := handler(grpc.NewContextWithServerTransportStream(octx, cs), req)
		first = newResult(reply, herr, cs)
		return i.stored(first)
	})
	switch {
	case first != nil:
		// The handler ran; err, if any, says its result was not kept
		// (the Executor logged why). The caller gets it all the same.
		return first.answer(ctx, false)
	case err == nil && replayed:
		r, derr := decode(resp)
		if derr != nil {
			i.cfg.Retrysafe.Logger.ErrorContext(ctx, "retrysafegrpc: a stored result cannot be decoded", "method", info.FullMethod, "err", derr)
			return nil, refusal(codes.Internal, ReasonReplayUndecodable, derr.Error(), 0, nil)
		}
		return r.answer(ctx, true)
	case err == nil:
		// Unreachable: Execute either runs fn, replays, or fails.
		return nil, status.Error(codes.Internal, "retrysafegrpc: the call neither ran nor replayed")
	case i.cfg.FailOpen && errors.Is(err, retrysafe.ErrStoreUnavailable) && !errors.Is(err, retrysafe.ErrStoreFull):
		// The Executor reported the call (store_error); it has no fail-open
		// outcome of its own to report instead.
		i.cfg.Retrysafe.Logger.WarnContext(ctx, "retrysafegrpc: store unavailable; running the call unprotected (FailOpen)", "err", err)
		return handler(ctx, req)
	}
	return nil, executeError(ctx, err)
}

// observe reports a call the interceptor answered itself.
func (i *Interceptor) observe(o retrysafe.Outcome, start time.Time) {
	i.cfg.Retrysafe.Observer.Outcome(o, time.Since(start))
}

// stored returns the Response to store for r, or nil when r is not kept
// (Config.StoreCode): the key is then released.
func (i *Interceptor) stored(r *result) *retrysafe.Response {
	if !i.cfg.StoreCode(r.st.Code()) {
		return nil
	}
	if len(r.msg) > i.cfg.MaxResponseSize {
		r = &result{st: statusWith(codes.Internal, fmt.Sprintf(
			"the first call's response (%d bytes) was larger than the %d bytes the idempotency store keeps; the call ran and is not run again for this key",
			len(r.msg), i.cfg.MaxResponseSize), errorInfo(ReasonResponseNotStored))}
	}
	resp, err := r.encode()
	if err != nil {
		// A status whose details cannot be encoded (it was sent, so this
		// does not happen): keep the code and message.
		resp, _ = (&result{st: status.New(r.st.Code(), r.st.Message()), header: r.header, trailer: r.trailer}).encode()
	}
	return resp
}

// newResult is the result of a handler that returned reply and err,
// with the metadata cs captured.
func newResult(reply any, err error, cs *capturingStream) *result {
	r := &result{st: status.Convert(err)}
	r.header, r.trailer = cs.captured()
	if err != nil {
		return r
	}
	if reply == nil {
		return r // an empty message
	}
	m, ok := message(reply)
	if !ok {
		r.st = status.Newf(codes.Internal, "retrysafegrpc: the response is a %T, not a protobuf message", reply)
		return r
	}
	b, merr := marshal(m)
	if merr != nil {
		r.st = status.Newf(codes.Internal, "retrysafegrpc: encoding the response: %v", merr)
		return r
	}
	r.msg = b
	return r
}

// answer sends r to the caller of ctx with its metadata, on a replay with
// the replay marker too.
func (r *result) answer(ctx context.Context, replayed bool) (any, error) {
	h := r.header
	if replayed {
		h = h.Copy()
		h.Set(MetadataReplayed, "true")
	}
	// These fail only without a stream (the interceptor called directly)
	// or with the client gone: nobody to tell.
	if len(h) > 0 {
		_ = grpc.SetHeader(ctx, h)
	}
	if len(r.trailer) > 0 {
		_ = grpc.SetTrailer(ctx, r.trailer)
	}
	if r.st.Code() != codes.OK {
		return nil, r.st.Err()
	}
	return opaque(r.msg), nil
}

// opaque returns a message that the protobuf codec encodes as b exactly:
// one without fields whose unknown fields are b.
func opaque(b []byte) proto.Message {
	m := &emptypb.Empty{}
	if len(b) > 0 {
		m.ProtoReflect().SetUnknown(b)
	}
	return m
}

// message returns v as a protobuf message (generated code of either API).
func message(v any) (proto.Message, bool) {
	switch m := v.(type) {
	case proto.Message:
		return m, true
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(m), true
	}
	return nil, false
}
