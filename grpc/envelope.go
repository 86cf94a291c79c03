package retrysafegrpc

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/retrysafe/retrysafe"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A stored gRPC result is a [retrysafe.Response] whose Body is an envelope
// in protobuf wire format, so that binary ("-bin") metadata and the
// response bytes survive every store unchanged:
//
//	1 version   varint, envelopeVersion
//	2 message   bytes, the response message as sent (OK only)
//	3 status    bytes, a google.rpc.Status (code, message, details; not OK only)
//	4 header    bytes, one key/value entry (1 key, 2 value) per metadata value
//	5 trailer   bytes, as header
//
// Its Status is the HTTP status that the gRPC code maps to (200 for OK),
// so that operators' tools (the admin view, `retrysafe keys`) show failed
// calls as failed, and its Header carries Content-Type application/grpc.
const envelopeVersion = 1

// ContentType is the Content-Type of a stored gRPC result's
// [retrysafe.Response].
const ContentType = "application/grpc"

// result is one call's outcome: what the handler answered and the metadata
// it set.
type result struct {
	msg     []byte         // the encoded response message, when st is OK
	st      *status.Status // never nil
	header  metadata.MD
	trailer metadata.MD
}

// encode returns r as a Response to store.
func (r *result) encode() (*retrysafe.Response, error) {
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, envelopeVersion)
	if r.st.Code() == codes.OK {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, r.msg)
	} else {
		st, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.st.Proto())
		if err != nil {
			return nil, fmt.Errorf("retrysafegrpc: encoding the status: %w", err)
		}
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, st)
	}
	b = appendMD(b, 4, r.header)
	b = appendMD(b, 5, r.trailer)
	return &retrysafe.Response{
		Status: httpStatus(r.st.Code()),
		Header: http.Header{"Content-Type": {ContentType}},
		Body:   b,
	}, nil
}

// appendMD appends md's values as entries of field num, keys sorted so
// that one result always encodes alike.
func appendMD(b []byte, num protowire.Number, md metadata.MD) []byte {
	for _, k := range sortedKeys(md) {
		for _, v := range md[k] {
			e := protowire.AppendTag(nil, 1, protowire.BytesType)
			e = protowire.AppendString(e, k)
			e = protowire.AppendTag(e, 2, protowire.BytesType)
			e = protowire.AppendString(e, v)
			b = protowire.AppendTag(b, num, protowire.BytesType)
			b = protowire.AppendBytes(b, e)
		}
	}
	return b
}

// errUndecodable: a stored response is not an envelope this version reads
// (a record completed by hand or by another adapter, say).
var errUndecodable = errors.New("retrysafegrpc: the stored response is not a gRPC result this version can read")

// decode reads a stored Response back.
func decode(resp *retrysafe.Response) (*result, error) {
	if resp == nil || resp.Header.Get("Content-Type") != ContentType {
		return nil, errUndecodable
	}
	r := &result{st: status.New(codes.OK, "")}
	version := uint64(0)
	hasMsg, hasStatus := false, false // one of them, once
	for b := resp.Body; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, errUndecodable
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			if version, n = protowire.ConsumeVarint(b); n < 0 {
				return nil, errUndecodable
			}
			b = b[n:]
			continue
		}
		if typ != protowire.BytesType {
			return nil, errUndecodable
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, errUndecodable
		}
		b = b[n:]
		switch num {
		case 2:
			if hasMsg || hasStatus {
				return nil, errUndecodable
			}
			r.msg, hasMsg = v, true
		case 3:
			var sp spb.Status
			if hasMsg || hasStatus || proto.Unmarshal(v, &sp) != nil || sp.GetCode() == int32(codes.OK) {
				return nil, errUndecodable
			}
			r.st, hasStatus = status.FromProto(&sp), true
		case 4, 5:
			k, val, ok := consumeEntry(v)
			if !ok {
				return nil, errUndecodable
			}
			md := &r.header
			if num == 5 {
				md = &r.trailer
			}
			if *md == nil {
				*md = metadata.MD{}
			}
			(*md)[k] = append((*md)[k], val)
		default:
			return nil, errUndecodable
		}
	}
	if version != envelopeVersion {
		return nil, errUndecodable
	}
	return r, nil
}

// consumeEntry reads one metadata entry.
func consumeEntry(b []byte) (k, v string, ok bool) {
	for i := range 2 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType || int(num) != i+1 {
			return "", "", false
		}
		b = b[n:]
		s, n := protowire.ConsumeString(b)
		if n < 0 {
			return "", "", false
		}
		b = b[n:]
		if i == 0 {
			k = s
		} else {
			v = s
		}
	}
	return k, v, len(b) == 0
}

// httpStatus is the HTTP status a gRPC code maps to, as gRPC-Gateway and
// Google's APIs map them.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError // Unknown, Internal, DataLoss and codes beyond
}

// Result returns a gRPC result as the interceptor stores it: reply (when
// err is nil) or err's status (code, message, details), with header and
// trailer metadata. Use it where a result is stored by other means than
// the interceptor:
//
//   - a [retrysafe.Resolver] that finds the operation done answers
//     ResolveComplete with Resolution.Response set to it, and every retry
//     then gets that result, as if the first call had answered it;
//   - a handler that commits the record in its own database transaction,
//     with the business write: it stores Result(reply, nil, header,
//     trailer) with the store's CompleteTx and the operation's
//     CompleteParams, calls MarkCompleted, and returns reply after
//     setting exactly that header and trailer metadata (the interceptor
//     then stores nothing).
func Result(reply proto.Message, err error, header, trailer metadata.MD) (*retrysafe.Response, error) {
	r := &result{st: status.Convert(err), header: header.Copy(), trailer: trailer.Copy()}
	if err == nil && reply != nil {
		b, merr := marshal(reply)
		if merr != nil {
			return nil, fmt.Errorf("retrysafegrpc: encoding the response: %w", merr)
		}
		r.msg = b
	}
	return r.encode()
}

// marshal encodes a response message. Deterministic, so that within one
// build a message encodes to the same bytes each time: what a handler
// stores itself with Result (in its own transaction) is then what the
// interceptor sends the first caller.
func marshal(m proto.Message) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}
