// Package provider is a mock payment service provider (PSP) for the payments
// example: its own HTTP server, with its own Idempotency-Key support and
// switches that make it misbehave the ways real networks and providers do.
//
// API:
//
//	POST /charges          {"amount":49900,"currency":"UAH","reference":"pay_…"}
//	                       Idempotency-Key required. The same key with the same
//	                       body returns the same charge (200, Idempotent-Replayed:
//	                       true) and never charges again; with another body, 422.
//	                       201 when charged, 402 when declined (amount above the
//	                       decline limit).
//	GET  /charges?key=K    the charge made with key K, or 404 (reconciliation)
//	GET  /charges          every charge
//	POST /admin/faults     {"fault":"drop-after-charge","count":2} queues faults
//	                       for the next charge requests; DELETE clears them
//	GET  /admin/stats      {"charges":n,"requests":n}
//
// Faults ([Fault]): charge then drop the connection without an answer,
// charge then answer slowly, fail with 503 before charging, fail with 503
// after charging. Tests may also choose faults per request with
// [Server.SetFaultFunc].
package provider
