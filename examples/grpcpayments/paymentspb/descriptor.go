// Package paymentspb is the example's gRPC API, written by hand with no
// generated code: the descriptor of its .proto file built in Go
// (registered in protoregistry.GlobalFiles, where
// retrysafegrpc.DefaultProtect reads GetOrder's NO_SIDE_EFFECTS and server
// reflection finds the service), its messages as plain structs sent on the
// wire as dynamicpb messages, and the service's grpc.ServiceDesc and client.
package paymentspb

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// ServiceName is the full name of the Payments service.
const ServiceName = "retrysafe.examples.payments.v1.Payments"

// File is the API's descriptor, what this payments.proto declares:
//
//	syntax = "proto3";
//	package retrysafe.examples.payments.v1;
//
//	service Payments {
//	  // CreateOrder opens an order. Send it with an idempotency-key: a retry
//	  // gets the same order.
//	  rpc CreateOrder(CreateOrderRequest) returns (Order);
//	  // PayOrder pays an open order once: a retry with the key gets the same
//	  // payment; another key for a paid order gets FailedPrecondition.
//	  rpc PayOrder(PayOrderRequest) returns (Payment);
//	  // GetOrder reads an order; it needs no key.
//	  rpc GetOrder(GetOrderRequest) returns (Order) {
//	    option idempotency_level = NO_SIDE_EFFECTS;
//	  }
//	}
//
//	message CreateOrderRequest { int64 amount = 1; string currency = 2; }
//	message PayOrderRequest { string order_id = 1; }
//	message GetOrderRequest { string order_id = 1; }
//	message Order { string id = 1; int64 amount = 2; string currency = 3; string status = 4; }
//	message Payment {
//	  string id = 1; string order_id = 2; int64 amount = 3;
//	  string currency = 4; string status = 5; string charge_id = 6;
//	}
//
// Clients in other languages get the same text from server reflection
// (grpcurl describe).
var File = registerFile()

func registerFile() protoreflect.FileDescriptor {
	field := func(name string, number int32, typ descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(number),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), Type: typ.Enum()}
	}
	str := func(name string, number int32) *descriptorpb.FieldDescriptorProto {
		return field(name, number, descriptorpb.FieldDescriptorProto_TYPE_STRING)
	}
	int64f := func(name string, number int32) *descriptorpb.FieldDescriptorProto {
		return field(name, number, descriptorpb.FieldDescriptorProto_TYPE_INT64)
	}
	message := func(name string, fields ...*descriptorpb.FieldDescriptorProto) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: proto.String(name), Field: fields}
	}
	method := func(name, in, out string, level descriptorpb.MethodOptions_IdempotencyLevel) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{Name: proto.String(name),
			InputType: proto.String(".retrysafe.examples.payments.v1." + in), OutputType: proto.String(".retrysafe.examples.payments.v1." + out),
			Options: &descriptorpb.MethodOptions{IdempotencyLevel: level.Enum()}}
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("retrysafe/examples/payments/v1/payments.proto"),
		Package: proto.String("retrysafe.examples.payments.v1"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			message("CreateOrderRequest", int64f("amount", 1), str("currency", 2)),
			message("PayOrderRequest", str("order_id", 1)),
			message("GetOrderRequest", str("order_id", 1)),
			message("Order", str("id", 1), int64f("amount", 2), str("currency", 3), str("status", 4)),
			message("Payment", str("id", 1), str("order_id", 2), int64f("amount", 3), str("currency", 4), str("status", 5), str("charge_id", 6)),
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Payments"), Method: []*descriptorpb.MethodDescriptorProto{
			method("CreateOrder", "CreateOrderRequest", "Order", descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN),
			method("PayOrder", "PayOrderRequest", "Payment", descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN),
			method("GetOrder", "GetOrderRequest", "Order", descriptorpb.MethodOptions_NO_SIDE_EFFECTS),
		}}},
	}
	// Either fails only on a mistake in the literal above (or a second
	// file of the same name), which every test of the example meets first.
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		panic("paymentspb: " + err.Error())
	}
	if err := protoregistry.GlobalFiles.RegisterFile(fd); err != nil {
		panic("paymentspb: " + err.Error())
	}
	return fd
}
