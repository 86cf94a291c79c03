module github.com/retrysafe/retrysafe/connect

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/retrysafe/retrysafe v0.1.0
	google.golang.org/protobuf v1.36.12
)
