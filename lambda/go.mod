module github.com/retrysafe/retrysafe/lambda

go 1.26.0

require (
	github.com/aws/aws-lambda-go v1.55.1
	github.com/retrysafe/retrysafe v0.1.0
)
