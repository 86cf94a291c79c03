// Package retrysafeconnect lets retrysafe's HTTP middleware protect
// Connect (connectrpc.com) services and answer in their clients' terms.
//
// Connect's unary calls are HTTP POSTs, which the middleware protects as
// they are ([retrysafe.NewMiddleware] in front of the Connect handler,
// the key in the Idempotency-Key header); procedures marked
// NO_SIDE_EFFECTS may be sent as GET, which the middleware lets through.
// What Connect clients do not understand is the middleware's own answers:
// problem+json. [Errors] rewrites them into the error format of the call's
// protocol, so that a Connect client sees a Connect error with the right
// code (and a gRPC or gRPC-Web client, a grpc-status):
//
//	mux.Handle(path, retrysafeconnect.Errors(mw(handler)))
//
// Two things to know. The middleware fingerprints a binary protobuf body
// as its bytes, and protobuf encodes map fields in random order: a
// caller's own retry of a message with maps (a new encoding) would get
// key-reused. Send such messages with the JSON codec
// (connect.WithProtoJSON()), whose canonical JSON the fingerprint reads
// without regard to member order, or keep the encoded request for
// retries. And the middleware stores no HTTP trailers, so a keyed call in
// the gRPC or gRPC-Web protocol cannot be replayed through it: for those,
// use the gRPC adapter (github.com/retrysafe/retrysafe/grpc) on a grpc-go
// server, or the Connect protocol (connect-go's default).
//
// This package needs only the standard library.
package retrysafeconnect

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
)

// ErrorDomain is the Domain of the google.rpc.ErrorInfo detail of the
// rewritten errors; its Reason is the problem type's slug in upper snake
// case (key-reused: KEY_REUSED), as in the gRPC adapter.
const ErrorDomain = "retrysafe.dev"

// Connect error codes (the Connect protocol's names).
const (
	CodeInvalidArgument    = "invalid_argument"
	CodeFailedPrecondition = "failed_precondition"
	CodeAborted            = "aborted"
	CodeUnavailable        = "unavailable"
	CodeResourceExhausted  = "resource_exhausted"
	CodeUnauthenticated    = "unauthenticated"
	CodeDeadlineExceeded   = "deadline_exceeded"
	CodeInternal           = "internal"
	CodeUnknown            = "unknown"
)

// problemCodes maps the middleware's problem types to Connect codes, as
// the gRPC adapter maps the same situations.
var problemCodes = map[string]string{
	retrysafe.ProblemMissingKey:        CodeInvalidArgument,
	retrysafe.ProblemInvalidKey:        CodeInvalidArgument,
	retrysafe.ProblemBadRequestBody:    CodeInvalidArgument,
	retrysafe.ProblemEmptyScope:        CodeUnauthenticated,
	retrysafe.ProblemMismatch:          CodeFailedPrecondition,
	retrysafe.ProblemInProgress:        CodeAborted,
	retrysafe.ProblemOutcomeUnknown:    CodeAborted,
	retrysafe.ProblemBodyTooLarge:      CodeResourceExhausted,
	retrysafe.ProblemStoreFull:         CodeResourceExhausted,
	retrysafe.ProblemStoreUnavailable:  CodeUnavailable,
	retrysafe.ProblemRequestTimeout:    CodeDeadlineExceeded,
	retrysafe.ProblemResponseNotStored: CodeInternal,
	retrysafe.ProblemReplayUndecodable: CodeInternal,
	"first-sent-expired":               CodeFailedPrecondition,
	"webhook-signature":                CodeUnauthenticated,
}

// grpcCodes are the gRPC status numbers of the Connect codes.
var grpcCodes = map[string]int{
	CodeUnknown: 2, CodeInvalidArgument: 3, CodeDeadlineExceeded: 4, CodeFailedPrecondition: 9,
	CodeAborted: 10, CodeResourceExhausted: 8, CodeInternal: 13, CodeUnavailable: 14, CodeUnauthenticated: 16,
}

// httpStatuses are the HTTP statuses the Connect protocol gives the codes.
var httpStatuses = map[string]int{
	CodeUnknown: 500, CodeInvalidArgument: 400, CodeDeadlineExceeded: 504, CodeFailedPrecondition: 400,
	CodeAborted: 409, CodeResourceExhausted: 429, CodeInternal: 500, CodeUnavailable: 503, CodeUnauthenticated: 401,
}

// Errors wraps next (the middleware in front of a Connect handler) so
// that the middleware's own answers, the problem+json responses it writes
// (refusals, and stored ones it replays), reach the client as errors of
// the call's protocol:
//
//   - Connect unary (and GET): the Connect error JSON, {"code",
//     "message", "details"}, with the HTTP status the protocol gives the
//     code; details hold a google.rpc.ErrorInfo (reason KEY_REUSED and
//     the like, domain retrysafe.dev) and, when the answer said
//     Retry-After, a google.rpc.RetryInfo.
//   - gRPC and gRPC-Web (Content-Type application/grpc…): a trailers-only
//     answer with grpc-status and grpc-message.
//
// The codes are those of the gRPC adapter: missing or invalid key
// invalid_argument, key reused failed_precondition, in progress and
// outcome unknown aborted, store unavailable unavailable. Every other
// response passes through untouched, streamed as it is written.
func Errors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ew := &errorWriter{ResponseWriter: w}
		next.ServeHTTP(ew, r)
		if ew.problem {
			writeError(w, r, ew.status, ew.buf.Bytes())
		}
	})
}

// errorWriter passes a response through unless its Content-Type is
// problem+json: that one it keeps to rewrite.
type errorWriter struct {
	http.ResponseWriter
	wrote   bool
	problem bool
	status  int
	buf     bytes.Buffer
}

func (w *errorWriter) WriteHeader(status int) {
	if w.wrote {
		return
	}
	if status < 200 { // informational (103 Early Hints): the answer comes later
		w.ResponseWriter.WriteHeader(status)
		return
	}
	w.wrote, w.status = true, status
	mt, _, _ := mime.ParseMediaType(w.Header().Get("Content-Type"))
	if status >= 400 && mt == retrysafe.ContentTypeProblem {
		w.problem = true
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *errorWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.problem {
		return w.buf.Write(p)
	}
	return w.ResponseWriter.Write(p)
}

// Flush flushes a response that passes through.
func (w *errorWriter) Flush() {
	if w.problem {
		return
	}
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *errorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeError writes the problem body (its HTTP status status) as an error
// of r's protocol.
func writeError(w http.ResponseWriter, r *http.Request, status int, body []byte) {
	var p retrysafe.Problem
	_ = json.Unmarshal(body, &p) // a body that does not decode keeps the status's code
	slug := p.Type[strings.LastIndexByte(p.Type, '/')+1:]
	code, ok := problemCodes[slug]
	if !ok {
		code = codeOfStatus(status)
	}
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	var retryAfter time.Duration
	if s, err := strconv.Atoi(w.Header().Get("Retry-After")); err == nil && s > 0 {
		retryAfter = time.Duration(s) * time.Second
	}
	h := w.Header()
	h.Del("Content-Length")
	if ct := r.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/grpc") {
		// Trailers-only: the status in the headers of a 200.
		h.Set("Content-Type", ct)
		h.Set("Grpc-Status", strconv.Itoa(grpcCodes[code]))
		h.Set("Grpc-Message", url.PathEscape(msg))
		w.WriteHeader(http.StatusOK)
		return
	}
	details := []detail{{Type: "google.rpc.ErrorInfo", Value: b64(errorInfo(reason(slug, code), ErrorDomain))}}
	if retryAfter > 0 {
		details = append(details, detail{Type: "google.rpc.RetryInfo", Value: b64(retryInfo(retryAfter))})
	}
	h.Set("Content-Type", "application/json")
	w.WriteHeader(httpStatuses[code])
	_ = json.NewEncoder(w).Encode(connectError{Code: code, Message: msg, Details: details})
}

// connectError is the Connect protocol's error JSON.
type connectError struct {
	Code    string   `json:"code"`
	Message string   `json:"message,omitempty"`
	Details []detail `json:"details,omitempty"`
}

type detail struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// b64 is base64 without padding, as the Connect protocol writes details.
func b64(b []byte) string { return base64.RawStdEncoding.EncodeToString(b) }

// reason is the ErrorInfo reason of a problem slug ("" for an unknown
// problem: the code's name).
func reason(slug, code string) string {
	if slug == "" {
		slug = code
	}
	return strings.ToUpper(strings.ReplaceAll(slug, "-", "_"))
}

// codeOfStatus is the Connect code of an HTTP status without a known
// problem type, as Connect clients map them.
func codeOfStatus(status int) string {
	switch status {
	case 400:
		return CodeInvalidArgument
	case 401:
		return CodeUnauthenticated
	case 408, 504:
		return CodeDeadlineExceeded
	case 409:
		return CodeAborted
	case 413, 429:
		return CodeResourceExhausted
	case 502, 503:
		return CodeUnavailable
	}
	return CodeUnknown
}

// errorInfo encodes a google.rpc.ErrorInfo (reason = 1, domain = 2) in
// protobuf wire format.
func errorInfo(reason, domain string) []byte {
	b := appendBytesField(nil, 1, []byte(reason))
	return appendBytesField(b, 2, []byte(domain))
}

// retryInfo encodes a google.rpc.RetryInfo whose retry_delay (field 1, a
// google.protobuf.Duration) is d in whole seconds (Duration field 1).
func retryInfo(d time.Duration) []byte {
	dur := binary.AppendUvarint([]byte{1<<3 | 0}, uint64(d/time.Second))
	return appendBytesField(nil, 1, dur)
}

// appendBytesField appends a length-delimited field.
func appendBytesField(b []byte, num int, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(num)<<3|2)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}
