// Package gateway is a reverse proxy that makes the non-idempotent requests
// of any HTTP service safe to retry, by putting the retrysafe middleware in
// front of a configured net/http/httputil.ReverseProxy. It is what
// `retrysafe serve` runs.
//
// A request to a protected method (POST and PATCH by default) with an
// Idempotency-Key is claimed in the store, forwarded once, and its response
// stored; retries with the same key get the stored response with
// Idempotent-Replayed: true. Per-route policies ([Route], [ParseConfig]) are
// matched with http.ServeMux patterns; other requests use
// [Config.Defaults].
//
// # Upstream failures
//
// When the upstream produced no response, the gateway tells two cases
// apart. If the request provably never left the gateway (a failed dial or
// DNS lookup, a failed TLS handshake, no connection obtained before the
// upstream timeout), nothing ran: the key is released and
// the client gets 502 (problem type [ProblemUpstreamUnreachable]), so its
// retry runs. Otherwise (a timeout or a broken connection after the request
// was written) the upstream may have acted on it: the record is abandoned,
// left processing until its lease runs out, and the client gets 502 or 504
// ([ProblemOutcomeUnknown]). [Config.UpstreamTimeout] must therefore be
// shorter than every lease.
//
// The Idempotency-Key is forwarded upstream with its value unchanged, under
// a lower-case field name so that net/http's Transport never resends the
// request on its own (see docs/gateway.md).
//
// # Operations
//
// [Gateway.AdminHandler] serves /healthz, /readyz, /metrics and the
// operator page at /ui/ ([UI]); [Metrics]
// implements retrysafe.Observer with Prometheus, and every metric name
// starts with [MetricPrefix]. [Gateway.RunSweeper] deletes expired records
// for stores that implement admin.Sweeper. Each protected request is
// logged as one structured line with its outcome and latency; key values
// and bodies are never logged. With [Config.TracerProvider] set, every
// request is traced with OpenTelemetry: a server span continuing the
// client's traceparent, child spans for the store calls and the upstream
// call, and the trace context sent upstream (see package
// github.com/retrysafe/retrysafe/otel).
package gateway
