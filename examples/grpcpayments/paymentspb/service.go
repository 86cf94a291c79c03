package paymentspb

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
)

// PaymentsServer is the server API of the Payments service.
type PaymentsServer interface {
	CreateOrder(context.Context, *CreateOrderRequest) (*Order, error)
	PayOrder(context.Context, *PayOrderRequest) (*Payment, error)
	GetOrder(context.Context, *GetOrderRequest) (*Order, error)
}

// ServiceDesc describes the Payments service to grpc.Server.RegisterService.
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*PaymentsServer)(nil),
	Methods: []grpc.MethodDesc{
		unary("CreateOrder", PaymentsServer.CreateOrder),
		unary("PayOrder", PaymentsServer.PayOrder),
		unary("GetOrder", PaymentsServer.GetOrder),
	},
	Metadata: File.Path(),
}

// RegisterPaymentsServer registers srv on s.
func RegisterPaymentsServer(s grpc.ServiceRegistrar, srv PaymentsServer) {
	s.RegisterService(&ServiceDesc, srv)
}

// unary returns the method name of the service, served by call. The
// interceptors see the request and the answer as protobuf messages, as
// they would generated ones.
func unary[Req any, PReq interface {
	*Req
	message
}, Resp message](name string, call func(PaymentsServer, context.Context, PReq) (Resp, error)) grpc.MethodDesc {
	handler := func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := dynamicpb.NewMessage(PReq(nil).descriptor())
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, in any) (any, error) {
			req := PReq(new(Req))
			decode(in.(proto.Message).ProtoReflect(), req)
			resp, err := call(srv.(PaymentsServer), ctx, req)
			if err != nil {
				return nil, err
			}
			return encode(resp), nil
		}
		if interceptor == nil {
			return h(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + ServiceName + "/" + name}, h)
	}
	return grpc.MethodDesc{MethodName: name, Handler: handler}
}

// PaymentsClient calls the Payments service.
type PaymentsClient struct{ cc grpc.ClientConnInterface }

// NewPaymentsClient returns a client of the Payments service on cc.
func NewPaymentsClient(cc grpc.ClientConnInterface) *PaymentsClient {
	return &PaymentsClient{cc: cc}
}

func (c *PaymentsClient) CreateOrder(ctx context.Context, in *CreateOrderRequest, opts ...grpc.CallOption) (*Order, error) {
	return invoke[Order](ctx, c.cc, "CreateOrder", in, opts)
}

func (c *PaymentsClient) PayOrder(ctx context.Context, in *PayOrderRequest, opts ...grpc.CallOption) (*Payment, error) {
	return invoke[Payment](ctx, c.cc, "PayOrder", in, opts)
}

func (c *PaymentsClient) GetOrder(ctx context.Context, in *GetOrderRequest, opts ...grpc.CallOption) (*Order, error) {
	return invoke[Order](ctx, c.cc, "GetOrder", in, opts)
}

func invoke[Resp any, PResp interface {
	*Resp
	message
}](ctx context.Context, cc grpc.ClientConnInterface, name string, in message, opts []grpc.CallOption) (PResp, error) {
	out := dynamicpb.NewMessage(PResp(nil).descriptor())
	if err := cc.Invoke(ctx, "/"+ServiceName+"/"+name, encode(in), out, opts...); err != nil {
		return nil, err
	}
	resp := PResp(new(Resp))
	decode(out, resp)
	return resp, nil
}
