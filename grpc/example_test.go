package retrysafegrpc_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"github.com/retrysafe/retrysafe"
	retrysafegrpc "github.com/retrysafe/retrysafe/grpc"
	"github.com/retrysafe/retrysafe/store/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"
)

// A server with the interceptors (last in the chain, after
// authentication) and a client whose caller pins one key to its retries.
func ExampleNew() {
	ic, err := retrysafegrpc.New(retrysafegrpc.Config{
		Retrysafe:  retrysafe.Config{Store: memory.New(memory.Config{})},
		RequireKey: true,
		// The caller's identity as the server established it; here, for
		// the example, verified metadata.
		Scope: retrysafegrpc.ScopeFromMetadata("authorization"),
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor( /* authentication, …, */ ic.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(ic.StreamServerInterceptor()),
	)
	newPayments().register(srv) // your pb.RegisterXServer(srv, …); here a test service that numbers its charges
	ln := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	conn, err := grpc.NewClient("passthrough:///example",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(retrysafegrpc.UnaryClientInterceptor(retrysafegrpc.ClientConfig{})))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer alice")
	ctx = retrysafegrpc.WithNewKey(ctx) // one key for this charge and its retries
	req, _ := structpb.NewStruct(map[string]any{"amount": 1250})
	for range 2 {
		var header metadata.MD
		reply := new(structpb.Struct)
		if err := conn.Invoke(ctx, methodCharge, req, reply, grpc.Header(&header)); err != nil {
			log.Fatal(err)
		}
		fmt.Println(reply.Fields["id"].GetStringValue(), "replayed:", retrysafegrpc.Replayed(header))
	}
	// Output:
	// ch_1 replayed: false
	// ch_1 replayed: true
}
