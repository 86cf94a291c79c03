// Runs stripe-node against `retrysafe serve` (in front of stripe-mock) and
// prints, as one JSON object, how the SDK surfaced each answer. The Go test
// (internal/e2e/stripe_sdk_test.go) starts the processes and judges the
// result; this script only reports.
//
//   GATEWAY_URL  the gateway, e.g. http://127.0.0.1:8080
//   SYNC_URL     answers once a slow request has reached the upstream
//   RUN          a unique prefix for this run's idempotency keys
import Stripe from 'stripe';

const gw = new URL(process.env.GATEWAY_URL);
const stripe = new Stripe('sk_test_retrysafe', {
  host: gw.hostname,
  port: gw.port,
  protocol: 'http',
  maxNetworkRetries: 0,
  telemetry: false,
});
const run = process.env.RUN;

// outcome describes a settled SDK call.
async function outcome(promise) {
  try {
    const obj = await promise;
    return { resolved: true, object: obj.object ?? null, id: obj.id ?? null };
  } catch (err) {
    return {
      resolved: false,
      stripeError: err instanceof Stripe.errors.StripeError,
      class: err.type ?? err.constructor.name,
      rawType: err.rawType ?? null,
      code: err.code ?? null,
      statusCode: err.statusCode ?? null,
      shouldRetry: err.headers?.['stripe-should-retry'] ?? null,
    };
  }
}

const result = {};
const key = `${run}-reused`;
result.first = await outcome(stripe.customers.create({ email: 'a@example.com' }, { idempotencyKey: key }));
result.replay = await outcome(stripe.customers.create({ email: 'a@example.com' }, { idempotencyKey: key }));
// The same key with another body: the gateway's 422 key-reused.
result.mismatch = await outcome(stripe.customers.create({ email: 'b@example.com' }, { idempotencyKey: key }));

// A duplicate while the original is still running: the gateway's 409
// request-in-progress.
const slowKey = `${run}-slow`;
const original = outcome(stripe.customers.create({ description: 'slow' }, { idempotencyKey: slowKey }));
const sync = await fetch(process.env.SYNC_URL);
if (!sync.ok) throw new Error(`sync: ${sync.status}`);
result.inFlight = await outcome(stripe.customers.create({ description: 'slow' }, { idempotencyKey: slowKey }));
result.original = await original;

process.stdout.write(JSON.stringify(result) + '\n');
