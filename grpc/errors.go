package retrysafegrpc

import (
	"context"
	"errors"
	"time"

	"github.com/retrysafe/retrysafe"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrorDomain is the Domain of the google.rpc.ErrorInfo detail that every
// refusal of the interceptors carries.
const ErrorDomain = "retrysafe.dev"

// Reasons of the ErrorInfo detail of the interceptors' refusals: stable
// names that clients may match on. Each is the problem type of the HTTP
// middleware's answer to the same situation (docs/problems.md), in the
// UPPER_SNAKE_CASE that ErrorInfo reasons use.
const (
	ReasonMissingKey        = "MISSING_KEY"         // InvalidArgument: the key is required and absent
	ReasonInvalidKey        = "INVALID_KEY"         // InvalidArgument: malformed, or several values
	ReasonKeyedStream       = "KEYED_STREAM"        // InvalidArgument: a streaming call carries a key
	ReasonUnsupportedCodec  = "UNSUPPORTED_CODEC"   // InvalidArgument: a keyed call in a codec other than protobuf
	ReasonEmptyScope        = "EMPTY_SCOPE"         // Unauthenticated: a keyed call whose scope is empty (Config.RequireScope)
	ReasonKeyReused         = "KEY_REUSED"          // FailedPrecondition: the key was used with another request
	ReasonRequestInProgress = "REQUEST_IN_PROGRESS" // Aborted: the first call still runs
	ReasonOutcomeUnknown    = "OUTCOME_UNKNOWN"     // Aborted: the first call ended without a result
	ReasonStoreUnavailable  = "STORE_UNAVAILABLE"   // Unavailable: nothing ran
	ReasonStoreFull         = "STORE_FULL"          // ResourceExhausted: nothing ran
	ReasonResponseNotStored = "RESPONSE_NOT_STORED" // Internal, stored: the response was over Config.MaxResponseSize
	ReasonReplayUndecodable = "REPLAY_UNDECODABLE"  // Internal: the stored result is not one this version reads
)

// refusal returns the status of a call the interceptor refused, with an
// ErrorInfo (and, when retryAfter is positive, a RetryInfo) detail.
func refusal(c codes.Code, reason, msg string, retryAfter time.Duration, meta map[string]string) error {
	details := []proto.Message{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: meta}}
	if retryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
	}
	return statusWith(c, msg, details...).Err()
}

// statusWith returns a status with details; if they cannot be attached
// (they always can: they are well-formed messages) the status without them.
func statusWith(c codes.Code, msg string, details ...proto.Message) *status.Status {
	p := status.New(c, msg).Proto()
	for _, d := range details {
		a, err := anyOf(d)
		if err != nil {
			break
		}
		p.Details = append(p.Details, a)
	}
	return status.FromProto(p)
}

// executeError translates an error of [retrysafe.Executor.Execute] (before
// anything ran) into the call's status.
func executeError(ctx context.Context, err error) error {
	var ip *retrysafe.InProgressError
	switch {
	case errors.Is(err, retrysafe.ErrMismatch):
		return refusal(codes.FailedPrecondition, ReasonKeyReused,
			"this idempotency key was already used with a different request; use a new key for a new request", 0, nil)
	case errors.As(err, &ip) && ip.OutcomeUnknown:
		meta := map[string]string{}
		if !ip.LeaseUntil.IsZero() {
			meta["lease_until"] = ip.LeaseUntil.UTC().Format(time.RFC3339Nano)
		}
		msg := "the first call with this idempotency key ended without a result: its outcome is unknown; the key is held until its lease runs out"
		if ip.Blocked {
			meta["blocked"] = "true"
			msg = "the first call with this idempotency key ended without a result: its outcome is unknown; the key is held until the outcome is resolved"
		}
		return refusal(codes.Aborted, ReasonOutcomeUnknown, msg, ip.RetryAfter, meta)
	case errors.As(err, &ip):
		return refusal(codes.Aborted, ReasonRequestInProgress,
			"a call with this idempotency key is still running; retry later with the same key to get its result", ip.RetryAfter, nil)
	case errors.Is(err, retrysafe.ErrInvalidKey):
		return refusal(codes.InvalidArgument, ReasonInvalidKey, err.Error(), 0, nil)
	case errors.Is(err, retrysafe.ErrStoreFull):
		return refusal(codes.ResourceExhausted, ReasonStoreFull,
			"the idempotency store is out of room; nothing ran", 0, nil)
	case errors.Is(err, retrysafe.ErrStoreUnavailable):
		return refusal(codes.Unavailable, ReasonStoreUnavailable,
			"the idempotency store is unavailable; nothing ran", time.Second, nil)
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return refusal(codes.Unavailable, ReasonStoreUnavailable, "the idempotency store failed; nothing ran", time.Second, nil)
}

// anyOf wraps d as an Any.
func anyOf(d proto.Message) (*anypb.Any, error) { return anypb.New(d) }

// errorInfo is an ErrorInfo detail of this package's domain.
func errorInfo(reason string) *errdetails.ErrorInfo {
	return &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}
}
