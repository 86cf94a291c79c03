package retrysafegrpc_test

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/retrysafe/retrysafe"
	retrysafegrpc "github.com/retrysafe/retrysafe/grpc"
	"github.com/retrysafe/retrysafe/store/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"
)

// A handler that completes its own record (as it would in its database
// transaction, with a store's CompleteTx) with Result: the first caller
// and every retry get the same bytes and metadata, even for a message with
// a map, and the interceptor writes nothing over it.
func TestHandlerCompletesItself(t *testing.T) {
	t.Parallel()
	store := memory.New(memory.Config{})
	ic, err := retrysafegrpc.New(retrysafegrpc.Config{Retrysafe: retrysafe.Config{Store: store}})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	srv := grpc.NewServer(grpc.UnaryInterceptor(ic.UnaryServerInterceptor()))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: serviceName, HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			req := new(structpb.Struct)
			if err := dec(req); err != nil {
				return nil, err
			}
			return ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: methodCharge}, func(ctx context.Context, _ any) (any, error) {
				runs++
				m := map[string]any{}
				for i := range 30 {
					m["k"+strconv.Itoa(i)] = float64(i)
				}
				reply, _ := structpb.NewStruct(m)
				header := metadata.Pairs("x-self", "1")
				resp, err := retrysafegrpc.Result(reply, nil, header, nil)
				if err != nil {
					return nil, err
				}
				op := retrysafe.OperationFromContext(ctx)
				if err := store.Complete(ctx, op.CompleteParams(resp)); err != nil {
					return nil, err
				}
				op.MarkCompleted()
				if err := grpc.SetHeader(ctx, header); err != nil {
					return nil, err
				}
				return reply, nil
			})
		}}},
	}, nil)
	ln := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///self",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e := &env{conn: conn}
	ctx := testContext(t)
	first := e.charge(ctx, "k-self", nil)
	again := e.charge(ctx, "k-self", nil)
	if first.err != nil || again.err != nil || !bytes.Equal(first.raw, again.raw) || runs != 1 {
		t.Fatalf("first %v, again %v, same bytes %v, runs %d", first.err, again.err, bytes.Equal(first.raw, again.raw), runs)
	}
	if !retrysafegrpc.Replayed(again.header) || again.header.Get("x-self")[0] != "1" || first.header.Get("x-self")[0] != "1" {
		t.Fatalf("headers %v %v", first.header, again.header)
	}
}
