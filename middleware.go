package retrysafe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/retrysafe/retrysafe/internal/httpmethod"
)

// NewMiddleware returns net/http middleware that makes the protected methods
// of the wrapped handler idempotent under cfg's policy. It implements the
// HTTP behaviour table of the design: 400 for a missing (when required) or
// invalid key, 413 for a body over the limit, 422 for a key reused with a
// different request, 409 (or a bounded wait) while the original is in
// flight, the stored response with Idempotent-Replayed: true once it
// completed, and 503 when the store is unavailable (unless FailOpen).
//
// A retry after an attempt whose owner stopped renewing its lease gets 409
// outcome-unknown with Retry-After = the lease left (see [InProgressError]).
// The handler is offered only the content codings retrysafe can decode
// (gzip, x-gzip, deflate), and a replay whose coding the retry's
// Accept-Encoding does not accept is decoded to identity (see
// docs/guarantees.md); Accept-Encoding is not part of the fingerprint.
//
// The handler runs with a context that a client hang-up does not cancel, so
// its result is stored for the retry; the context is cancelled only if the
// lease is lost to another claimant. The handler finds the operation with
// [OperationFromContext].
//
// If the handler panics before writing a status, the record is released
// (as if the process had crashed before answering, without waiting for
// the lease) and the panic continues up the stack. A panic after the
// status was written leaves an attempt whose outcome is unknown (it got
// far enough to answer): the record is marked abandoned (see
// [Operation.Abandon]) and left to its lease and Config.OnUnknown. A panic
// with http.ErrAbortHandler after the status means the response was cut
// off: the operation ran, so a 502 problem is stored in its place and it
// never runs again for this key; before a status, the outcome is unknown
// and the record is abandoned.
func NewMiddleware(cfg Config) (func(http.Handler) http.Handler, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	e := newEngine(&c)
	ro, _ := c.Observer.(RequestObserver)
	return func(next http.Handler) http.Handler {
		return &protectedHandler{e: e, cfg: &c, next: next, ro: ro}
	}, nil
}

type protectedHandler struct {
	e    *engine
	cfg  *Config
	next http.Handler
	ro   RequestObserver // cfg.Observer when it wants the request; else nil
	// The Tracer, if any, is e.tracer.
}

// observe reports the outcome of r to the Observer.
func (h *protectedHandler) observe(r *http.Request, o Outcome, d time.Duration) {
	if h.ro != nil {
		h.ro.RequestOutcome(r, o, d)
		return
	}
	h.cfg.Observer.Outcome(o, d)
}

func (h *protectedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !httpmethod.Protected(h.cfg.Methods, r.Method) {
		h.next.ServeHTTP(w, r)
		return
	}
	if h.e.tracer != nil {
		h.serveTraced(w, r)
		return
	}
	if !h.e.observed {
		// No Observer: nothing to time (a RequestObserver is an Observer).
		h.serve(w, r)
		return
	}
	start := time.Now()
	outcome := h.serve(w, r)
	if outcome != "" {
		h.observe(r, outcome, time.Since(start))
	}
}

// serveTraced is ServeHTTP of a protected request under a Tracer: the
// request is a StepRequest, and runs with the context the Tracer gave it.
func (h *protectedHandler) serveTraced(w http.ResponseWriter, r *http.Request) {
	t := h.e.tracer
	ctx, start := h.e.startStep(r.Context(), StepInfo{Step: StepRequest, Request: r})
	r = r.WithContext(ctx)
	var outcome Outcome
	defer func() {
		// Also when the handler panicked: the span, or whatever the
		// Tracer made, must end.
		t.EndStep(ctx, StepInfo{Step: StepRequest, Request: r, Outcome: outcome, Duration: time.Since(start)})
	}()
	outcome = h.serve(w, r)
	if outcome != "" {
		h.observe(r, outcome, time.Since(start))
	}
}

// serve handles a protected request and returns its outcome ("" when the
// request passed through unprotected or the client went away first).
func (h *protectedHandler) serve(w http.ResponseWriter, r *http.Request) Outcome {
	c := h.cfg
	var key string
	var rr repeatability // the Repeatable Requests headers (repeatability.go)
	if c.Key == nil {
		var outcome Outcome
		var pass bool
		if key, rr, outcome, pass = h.headerKey(w, r); pass {
			h.next.ServeHTTP(w, r)
			return ""
		} else if outcome != "" {
			return outcome
		}
	}
	body, err := readBody(r, c.MaxBody)
	if err != nil {
		if errors.Is(err, errBodyTooLarge) {
			WriteProblem(w, c.problem(ProblemBodyTooLarge, "Request body too large", http.StatusRequestEntityTooLarge,
				fmt.Sprintf("The request body exceeds the limit of %d bytes; nothing was processed.", c.MaxBody)), 0)
			return OutcomeTooLarge
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			// The server's read deadline ran out mid-body: say so (the
			// connection is closed after this answer) rather than let
			// net/http answer 200 to a request that never ran.
			w.Header().Set("Connection", "close")
			WriteProblem(w, c.problem(ProblemRequestTimeout, "Request body timed out", http.StatusRequestTimeout,
				"The request body did not arrive within the server's read timeout, so nothing was processed. Retry with the same Idempotency-Key."), 0)
			return ""
		}
		// Bad chunked framing, a body cut short (by a half-close, say):
		// nothing can run. Say so, rather than let net/http answer 200 to
		// a request that never ran, and close the connection, whose
		// framing can no longer be trusted. The request's context tells
		// nothing here (a failed read of the connection cancels it, also
		// after a half-close whose client still reads), so the answer is
		// written; to a client that is gone it is lost, harmlessly.
		w.Header().Set("Connection", "close")
		WriteProblem(w, c.problem(ProblemBadRequestBody, "Request body unreadable", http.StatusBadRequest,
			"The request body could not be read ("+err.Error()+"), so nothing was processed. Send the whole body, framed as its Content-Length or chunked encoding says, and retry with the same Idempotency-Key."), 0)
		return OutcomeBadRequestBody
	}
	if c.Key != nil { // the key is somewhere else (keysource.go)
		var outcome Outcome
		var pass bool
		if key, outcome, pass = h.extractKey(w, r, body); pass {
			h.next.ServeHTTP(w, withBody(r, r.Context(), body))
			return ""
		} else if outcome != "" {
			return outcome
		}
	}
	scope, err := c.Scope(r)
	if err != nil {
		WriteProblem(w, &Problem{Type: "about:blank", Title: "Unauthorized", Status: http.StatusUnauthorized,
			Detail: "The caller's identity could not be established: " + err.Error()}, 0)
		return OutcomeUnauthorized
	}
	if scope == "" && c.RequireScope {
		return h.refuseEmptyScope(w)
	}
	fp, err := fingerprint(r.Context(), r.Method, c.FingerprintPath(r), r.URL.RawQuery, body, c.IgnoreFields)
	if err != nil {
		return "" // the client went away while the body was fingerprinted; nothing ran
	}
	fp = rr.fingerprint(fp)

	rec, claimed, err := h.e.acquire(r.Context(), scope, key, fp)
	switch {
	case err == nil && claimed:
		rr.accept(w)
		return h.execute(w, r, rec, body)
	case err == nil:
		rr.accept(w)
		h.replay(w, r, rec.Response)
		return OutcomeReplayed
	}
	return h.refuse(w, r, err, body)
}

// refuse answers a request whose claim acquire refused with err.
func (h *protectedHandler) refuse(w http.ResponseWriter, r *http.Request, err error, body []byte) Outcome {
	c := h.cfg
	outcome, inProgress := refusal(err)
	switch {
	case outcome == OutcomeMismatch:
		WriteProblem(w, c.problem(ProblemMismatch, "Idempotency-Key reused", http.StatusUnprocessableEntity,
			"This Idempotency-Key was already used with a different request (method, path, query or body). Use a new key for a new operation."), 0)
		return outcome
	case inProgress != nil:
		WriteProblem(w, c.inProgressProblem(inProgress), inProgress.RetryAfter)
		return outcome
	case r.Context().Err() != nil:
		return "" // the client went away while we waited; nothing ran
	case outcome == OutcomeStoreFull:
		// Capacity, not an outage: never fail open, or one client that
		// fills the store would switch protection off for everyone.
		c.Logger.ErrorContext(r.Context(), "retrysafe: store full", "err", err)
		WriteProblem(w, c.problem(ProblemStoreFull, "Idempotency store full", http.StatusServiceUnavailable,
			"The request was not processed: the idempotency store has no room for new keys. Retry later with the same key."), storeFullRetryAfter)
		return outcome
	}
	c.Logger.ErrorContext(r.Context(), "retrysafe: store unavailable", "err", err)
	// Only an unreachable store fails open. Any other store error
	// (a stored response it cannot decrypt, say) may hide a completed
	// record: running the handler could run the operation twice.
	if c.FailOpen && errors.Is(err, ErrStoreUnavailable) {
		if w.Header().Get(HeaderRepeatabilityResult) != "" {
			w.Header().Set(HeaderRepeatabilityResult, "accepted") // it runs, unprotected
		}
		h.next.ServeHTTP(w, withBody(r, r.Context(), body))
		return OutcomeFailOpen
	}
	WriteProblem(w, c.problem(ProblemStoreUnavailable, "Idempotency store unavailable", http.StatusServiceUnavailable,
		"The request was not processed because its idempotency could not be guaranteed. Retry later with the same key."), 2*time.Second)
	return outcome
}

// storeFullRetryAfter is the Retry-After of a store-full answer: room
// comes back as records expire or an operator acts, not within a second.
const storeFullRetryAfter = 5 * time.Second

// execute runs the handler for a record this request owns, stores the
// result, then answers the client.
func (h *protectedHandler) execute(w http.ResponseWriter, r *http.Request, rec *Record, body []byte) Outcome {
	c := h.cfg
	cw := &captureWriter{w: w, header: make(http.Header), limit: c.MaxResponseBody}
	var panicked any
	outcome, err := h.e.run(r.Context(), rec, true, func(ctx context.Context, op *Operation) (resp *Response) {
		defer func() {
			// The panic goes on once the record is settled (see below).
			v := recover()
			if v == nil {
				return
			}
			panicked = v
			switch {
			case v == http.ErrAbortHandler && cw.wroteHeader:
				// The response was cut off: the operation ran.
				op.setDisposition(DispositionComplete)
				resp = h.notStored(cw, "the response was cut off before it was complete")
			case v == http.ErrAbortHandler, cw.wroteHeader:
				// Nothing answered (a proxy's upstream died), or the
				// handler got as far as answering: the outcome is unknown.
				op.Abandon()
			default:
				op.Release() // as if the process had crashed, without the wait for the lease
			}
		}()
		hr := withBody(r, ctx, body)
		negotiate(hr)
		h.next.ServeHTTP(cw, hr)
		switch status := cw.statusCode(); {
		case op.Disposition() != DispositionComplete, !c.StoreStatus(status):
			return nil
		case cw.overflow:
			return h.notStored(cw, fmt.Sprintf("the response body exceeded the storage limit of %d bytes", c.MaxResponseBody))
		}
		return cw.response(c.StoreHeader)
	})
	h.e.logNotStored(r.Context(), err)
	if panicked != nil {
		h.observe(r, outcome, 0)
		panic(panicked)
	}
	cw.flush()
	return outcome
}

// notStored is the response stored in place of one that could not be kept.
func (h *protectedHandler) notStored(cw *captureWriter, why string) *Response {
	var buf bytes.Buffer
	status := http.StatusBadGateway
	p := h.cfg.problem(ProblemResponseNotStored, "Response not stored", status,
		fmt.Sprintf("The operation ran and answered %d, but %s, so it was not stored. It will not run again for this key; check the resource's state.", cw.statusCode(), why))
	rec := &headerRecorder{header: make(http.Header), body: &buf}
	WriteProblem(rec, p, 0)
	return &Response{Status: status, Header: rec.header, Body: buf.Bytes()}
}

type headerRecorder struct {
	header http.Header
	body   io.Writer
}

func (r *headerRecorder) Header() http.Header         { return r.header }
func (r *headerRecorder) WriteHeader(int)             {}
func (r *headerRecorder) Write(p []byte) (int, error) { return r.body.Write(p) }

// readBody reads the whole request body, up to limit bytes. body is nil
// for an absent body.
func readBody(r *http.Request, limit int64) (body []byte, err error) {
	if r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	// Sized from Content-Length when there is one, +1 to see EOF without
	// growing.
	size := int64(512)
	if r.ContentLength >= 0 {
		size = r.ContentLength + 1
	}
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// withBody returns a shallow copy of r with ctx and a re-readable body
// (GetBody set, so that a Transport may resend it).
func withBody(r *http.Request, ctx context.Context, body []byte) *http.Request {
	r2 := r.WithContext(ctx)
	r2.ContentLength = int64(len(body))
	if len(body) == 0 {
		r2.Body = http.NoBody
		r2.GetBody = func() (io.ReadCloser, error) { return http.NoBody, nil }
		return r2
	}
	b := &requestBody{body: body}
	b.Reset(body)
	r2.Body, r2.GetBody = b, b.reopen
	return r2
}

// requestBody is the re-readable body handed to the handler.
type requestBody struct {
	bytes.Reader
	body []byte
}

func (*requestBody) Close() error { return nil }

// reopen is the request's GetBody.
func (b *requestBody) reopen() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(b.body)), nil
}
