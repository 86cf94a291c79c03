package retrysafegrpc_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/retrysafe/retrysafe"
	retrysafegrpc "github.com/retrysafe/retrysafe/grpc"
	"github.com/retrysafe/retrysafe/internal/adaptertest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The shared black-box suite, over bufconn and over TCP: the call's body
// is a google.protobuf.BytesValue, the answer's Meta the header metadata
// x-adaptertest-meta, the tenant "authorization: Bearer <tenant>" read by
// the server's own auth interceptor into the context, where Config.Scope
// finds it.
func TestAdapterSuite(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			adaptertest.Run(t, suiteAdapter{transport: tr})
		})
	}
}

const (
	suiteMethod = "/retrysafe.adaptertest.Suite/Call"
	suiteMeta   = "x-adaptertest-meta"
)

type suiteAdapter struct{ transport string }

func (a suiteAdapter) Start(t *testing.T, cfg retrysafe.Config, h adaptertest.Handler) adaptertest.Client {
	ic, err := retrysafegrpc.New(retrysafegrpc.Config{Retrysafe: cfg, RequireKey: cfg.RequireKey, Scope: tenantScope})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(bearerAuth, ic.UnaryServerInterceptor()))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "retrysafe.adaptertest.Suite",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Call",
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				req := new(wrapperspb.BytesValue)
				if err := dec(req); err != nil {
					return nil, err
				}
				return ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: suiteMethod}, func(ctx context.Context, req any) (any, error) {
					ans := h(ctx, req.(*wrapperspb.BytesValue).GetValue())
					if err := grpc.SetHeader(ctx, metadata.Pairs(suiteMeta, ans.Meta)); err != nil {
						return nil, err
					}
					return wrapperspb.Bytes(ans.Body), nil
				})
			},
		}},
	}, nil)
	var ln net.Listener
	target := "passthrough:///suite"
	var opts []grpc.DialOption
	if a.transport == "bufconn" {
		bl := bufconn.Listen(1 << 20)
		ln = bl
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }))
	} else {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		target = ln.Addr().String()
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(target, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return suiteClient{conn}
}

// bearerAuth puts the tenant of "authorization: Bearer <tenant>" in the
// context (tenantKey), as a server's authentication would.
func bearerAuth(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) == 1 {
		if tenant := adaptertest.BearerTenant(v[0]); tenant != "" {
			ctx = context.WithValue(ctx, tenantKey{}, tenant)
		}
	}
	return h(ctx, req)
}

type suiteClient struct{ conn *grpc.ClientConn }

func (c suiteClient) Send(ctx context.Context, call adaptertest.Call) (adaptertest.Reply, error) {
	if call.Key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, retrysafegrpc.MetadataKey, call.Key)
	}
	if call.Tenant != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+call.Tenant)
	}
	var header metadata.MD
	out := new(wrapperspb.BytesValue)
	err := c.conn.Invoke(ctx, suiteMethod, wrapperspb.Bytes(call.Body), out, grpc.Header(&header))
	st := status.Convert(err)
	r := adaptertest.Reply{Detail: st.String()}
	if ctx.Err() != nil && err != nil {
		return r, errors.Join(err, ctx.Err())
	}
	var reason string
	retry := false
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.RetryInfo:
			retry = d.GetRetryDelay().AsDuration() > 0
		}
	}
	switch {
	case st.Code() == codes.OK:
		r.Kind, r.Body, r.Replayed = adaptertest.KindAnswer, out.GetValue(), retrysafegrpc.Replayed(header)
		if v := header.Get(suiteMeta); len(v) == 1 {
			r.Meta = v[0]
		}
	case st.Code() == codes.InvalidArgument && (reason == retrysafegrpc.ReasonMissingKey || reason == retrysafegrpc.ReasonInvalidKey):
		r.Kind = adaptertest.KindBadKey
	case st.Code() == codes.FailedPrecondition && reason == retrysafegrpc.ReasonKeyReused:
		r.Kind = adaptertest.KindMismatch
	case st.Code() == codes.Aborted && reason == retrysafegrpc.ReasonRequestInProgress && retry:
		r.Kind = adaptertest.KindInProgress
	case st.Code() == codes.Unavailable && reason == "":
		return r, err // the transport failed: no answer read
	}
	return r, nil
}
