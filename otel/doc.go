// Package retrysafeotel traces retrysafe with OpenTelemetry: an
// [Observer] for the middleware and Do (retrysafe.Config.Observer,
// retrysafe.DoConfig.Observer) that makes a span for each protected
// request or Do call and a child span for each store call and wait. The
// gateway (`retrysafe serve`) uses it with its own server and upstream
// spans; package github.com/retrysafe/retrysafe/otel/sdkenv builds a
// TracerProvider from the standard OTEL_* environment variables.
//
// The core package retrysafe imports no OpenTelemetry code: it tells a
// retrysafe.Tracer (which Observer is) when each step starts and ends, and
// costs nothing when no Tracer is configured. This package depends on the
// OpenTelemetry API only, not on the SDK.
//
// Spans never carry the idempotency key, the caller's scope, headers or
// bodies; retrysafe.key.hash (a truncated SHA-256 of scope and key) ties
// the retries of one operation together.
package retrysafeotel
