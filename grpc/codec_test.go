package retrysafegrpc_test

import (
	"context"
	"testing"

	retrysafegrpc "github.com/retrysafe/retrysafe/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// jsonCodec is a protojson codec, as some services register for
// application/grpc+json.
type jsonCodec struct{}

func (jsonCodec) Name() string                    { return "rstest-json" }
func (jsonCodec) Marshal(v any) ([]byte, error)   { return protojson.Marshal(v.(proto.Message)) }
func (jsonCodec) Unmarshal(b []byte, v any) error { return protojson.Unmarshal(b, v.(proto.Message)) }

func init() { encoding.RegisterCodec(jsonCodec{}) }

// A keyed call in another codec is refused (its replay could not be
// encoded in it); an unkeyed one passes.
func TestOtherCodecRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bufconn", nil)
	ctx := testContext(t)
	sub := grpc.CallContentSubtype(jsonCodec{}.Name())
	req := map[string]any{"amount": 1}
	keyed := e.chargeCodec(ctx, "k-json", req, sub)
	wantRefusal(t, keyed, codes.InvalidArgument, retrysafegrpc.ReasonUnsupportedCodec)
	if err := e.chargeCodec(ctx, "", req, sub); err != nil {
		t.Fatalf("unkeyed JSON call: %v", err)
	}
	if e.pay.effects.Load() != 1 {
		t.Fatalf("%d effects", e.pay.effects.Load())
	}
}

// chargeCodec calls Charge with the call options' codec (not rawCodec).
func (e *env) chargeCodec(ctx context.Context, key string, fields map[string]any, opts ...grpc.CallOption) error {
	req, err := structpb.NewStruct(fields)
	if err != nil {
		return err
	}
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, retrysafegrpc.MetadataKey, key)
	}
	return e.conn.Invoke(ctx, methodCharge, req, new(structpb.Struct), opts...)
}
