package retrysafegrpc_test

import (
	"sync"
	"testing"

	retrysafegrpc "github.com/retrysafe/retrysafe/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	_ "google.golang.org/protobuf/types/known/emptypb" // registers google/protobuf/empty.proto
)

// registerOnce registers the test's file once per process (-count > 1).
var (
	registerOnce sync.Once
	registerErr  error
)

// A method whose .proto says NO_SIDE_EFFECTS is left alone by default,
// like an HTTP GET; other methods of the same service are protected.
func TestDefaultProtectReadsIdempotencyLevel(t *testing.T) {
	t.Parallel()
	empty := ".google.protobuf.Empty"
	method := func(name string, level descriptorpb.MethodOptions_IdempotencyLevel) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: &empty, OutputType: &empty,
			Options: &descriptorpb.MethodOptions{IdempotencyLevel: level.Enum()}}
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("retrysafe/grpctest/protect.proto"), Package: proto.String("retrysafe.grpctest.protect"),
		Syntax: proto.String("proto3"), Dependency: []string{"google/protobuf/empty.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Orders"), Method: []*descriptorpb.MethodDescriptorProto{
			method("Get", descriptorpb.MethodOptions_NO_SIDE_EFFECTS),
			method("Put", descriptorpb.MethodOptions_IDEMPOTENT),
			method("Create", descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN),
		}}},
	}
	registerOnce.Do(func() {
		fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
		if err == nil {
			err = protoregistry.GlobalFiles.RegisterFile(fd)
		}
		registerErr = err
	})
	if registerErr != nil {
		t.Fatal(registerErr)
	}
	for m, want := range map[string]bool{
		"/retrysafe.grpctest.protect.Orders/Get":    false,
		"/retrysafe.grpctest.protect.Orders/Put":    true,
		"/retrysafe.grpctest.protect.Orders/Create": true,
		"/retrysafe.grpctest.protect.Orders/Nope":   true,
		methodCharge:                   true, // not registered
		"/grpc.health.v1.Health/Check": false,
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": false,
		"garbage": true,
	} {
		if got := retrysafegrpc.DefaultProtect(m); got != want {
			t.Errorf("DefaultProtect(%q) = %v, want %v", m, got, want)
		}
	}
}
