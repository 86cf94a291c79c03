package retrysafelambda

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/retrysafe/retrysafe"
)

// Func wraps a handler of direct invocations (lambda.Start's typed
// handler, an event from EventBridge, Step Functions or the Invoke API)
// so that it runs at most once per key and every retry with that key gets
// the first run's result until it expires.
//
// The key is the event's member at Config.Key (a string or an integer),
// or, when Key is empty, the SHA-256 of the whole event as canonical JSON,
// so that a retry of the same event is the same call. The returned
// function takes the event as it arrived (json.RawMessage, which
// lambda.Start accepts) and decodes it into In with encoding/json. Its
// result is fn's, encoded as JSON in the store and decoded into Out on
// replay.
//
// It fails with [ErrNoTimeLeft] when the invocation's deadline has passed;
// with [ErrNoKey] (under Config.RequireKey) or retrysafe.ErrInvalidKey for
// a missing or malformed key; with retrysafe.ErrMismatch when the key was
// used with another payload (the whole event, or its members in
// Config.Validate); with a *retrysafe.InProgressError while the first run
// goes on (after waiting, by default) or its outcome is unknown; with a
// store error (matching retrysafe.ErrStoreUnavailable or ErrStoreFull);
// or with fn's error (a stored one as *retrysafe.FailedError). In every
// case but the last nothing ran, and the invocation's error makes Lambda
// retry it (asynchronous invocations, by default, twice). When fn
// succeeded but its result could not be stored, the result is returned
// without an error (and the failure logged): an error would make Lambda
// run fn again.
func Func[In, Out any](cfg Config, fn func(context.Context, In) (Out, error)) (func(context.Context, json.RawMessage) (Out, error), error) {
	w, err := newWrapper(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, event json.RawMessage) (Out, error) {
		var zero Out
		fp, err := w.payloadFingerprint("event", "", "", "", event)
		if err != nil {
			return zero, err
		}
		key := retrysafe.Fingerprint("", "event:", "", event, nil) // the whole event's hash
		if w.key != nil {
			k, ok, err := w.eventKey(event)
			switch {
			case err != nil:
				return zero, err
			case !ok:
				if err := w.noKey(ctx, "event"); err != nil {
					return zero, err
				}
				in, err := decode[In](event)
				if err != nil {
					return zero, err
				}
				return fn(ctx, in)
			}
			key = k
		}
		in, err := decode[In](event)
		if err != nil {
			return zero, err
		}
		call := func(ctx context.Context) (Out, error) { return fn(ctx, in) }
		out, _, err := run(ctx, w, w.cfg.Scope, key, fp, call)
		return out, err
	}, nil
}

func decode[In any](event json.RawMessage) (In, error) {
	var in In
	if err := json.Unmarshal(event, &in); err != nil {
		return in, fmt.Errorf("retrysafe/lambda: decoding the event: %w", err)
	}
	return in, nil
}
