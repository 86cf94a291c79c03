// Package retrysafelambda makes AWS Lambda handlers idempotent: a
// function that Lambda invokes twice with the same event (an asynchronous
// invocation retried, an SQS message delivered again, a client retrying
// through API Gateway) runs once, and every duplicate gets the first
// run's result. It is the engine of retrysafe.Do, on any retrysafe.Store
// (store/dynamodb, the serverless choice; store/postgres, store/redis,
// store/mysql, store/sqlite; store/memory in tests), for three kinds of
// event:
//
//   - [Func]: direct invocations with a typed event and result;
//   - [SQS]: SQS batches, each message on its own, with partial batch
//     failures (events.SQSEventResponse);
//   - [APIGateway] and [HTTPAPI]: API Gateway proxy events (REST API and
//     HTTP API, which Lambda function URLs share), answered as the HTTP
//     middleware answers.
//
// The key comes from the event by JSON Pointer (Config.Key); the
// fingerprint covers the payload, or chosen members of it
// (Config.Validate), so that a key reused with another payload fails
// instead of replaying the wrong result. The stored result is the
// handler's JSON output; a handler's error releases the key (the retry
// runs again) unless Config.Permanent says it is final.
//
// # Leases and the invocation's deadline
//
// A claim holds a lease, renewed while the handler runs, that never runs
// past the invocation's deadline (context.Deadline) plus
// Config.DeadlineGrace: when Lambda stops a function at its timeout, its
// key is free for the retry right after, not after a TTL. An invocation
// whose deadline has already passed, or that has no time left, claims
// nothing and fails with [ErrNoTimeLeft]; an invocation without a
// deadline (a test, a local harness) gets Config.Lease, renewed while it
// runs. So no deadline, whatever its value, leaves a key locked until
// its TTL. A handler that returns an error once its context has ended
// has an unknown outcome: its record is marked abandoned, and the first
// retry after the lease takes it over (retrysafe.Operation.Attempt() is
// then 2: check what the first attempt did), or, with Config.OnUnknown
// block, waits for a Resolver. docs/lambda.md compares this with
// Powertools for AWS Lambda, point by point.
//
// Config.CacheSize keeps completed results in memory per execution
// environment, so that a warm function answers a duplicate without a
// store call.
package retrysafelambda
