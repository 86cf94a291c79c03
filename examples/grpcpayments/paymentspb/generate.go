// Package paymentspb holds the example's protobuf messages and gRPC
// service, generated from payments.proto (committed, so building needs no
// protoc). To regenerate, with protoc, protoc-gen-go v1.36.12 and
// protoc-gen-go-grpc v1.6.0 on PATH:
//
//	go generate ./examples/grpcpayments/paymentspb
package paymentspb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative payments.proto
