// Package retrysafegin makes Gin routes idempotent: [New] returns a
// gin.HandlerFunc that runs the rest of the chain at most once per
// Idempotency-Key, stores its response and replays it, byte for byte, to
// every retry.
//
// It is the net/http middleware ([retrysafe.NewMiddleware]) hosted natively
// in Gin's chain, so it answers exactly as the middleware does (the
// behaviour table in docs/guarantees.md: 400, 409, 413, 422, 503 problems,
// Idempotent-Replayed: true, Repeatable Requests, Accept-Encoding of
// replays), with the same [retrysafe.Config]. What the common
// http.Handler bridges get wrong is the writer: they swap Header, Write and
// WriteHeader only, so output through WriteString, a status set with
// c.Status and never written, and c.Writer.Status() bypass the capture.
// Here the handlers behind New write to a gin.ResponseWriter of its own
// whose every method goes through the capture:
//
//   - Write, WriteString, WriteHeader (lazily, as Gin's: the status can
//     change until the first byte), WriteHeaderNow, Status, Size and
//     Written behave as Gin's own writer does;
//   - Flush is accepted but sends nothing: the answer is stored before the
//     client sees it, so c.Stream's chunks reach the client (and every
//     retry) together when the handler returns;
//   - Hijack is refused (a hijacked connection's bytes cannot be stored);
//   - CloseNotify's channel never fires: the operation goes on when the
//     client hangs up, and its result is stored for the retry;
//   - Pusher is nil: a push could not be replayed.
//
// Requests the middleware passes through (methods it does not protect,
// requests without a key when none is required, FailOpen) run with Gin's
// own writer, untouched. The handlers' c.Request carries the
// [retrysafe.Operation] in its context, which a client hang-up does not
// cancel. When the middleware answers by itself (a replay or a refusal),
// the rest of the chain does not run (c.Abort).
//
// Put New after the middleware that must see every answer (gin.Logger,
// gin.Recovery, compression, CORS) and before the handlers it protects.
// A handler that panics behind it releases the key (the retry runs again)
// and the panic goes on to gin.Recovery; a gin.Recovery placed behind New
// turns the panic into a 500, which is stored and replayed like any
// answer.
package retrysafegin

import (
	"bufio"
	"io"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/retrysafe/retrysafe"
)

// New returns Gin middleware that makes the protected methods of the
// routes behind it idempotent under cfg (see [retrysafe.NewMiddleware]
// and [retrysafe.Config]). The error is the one NewMiddleware returns for
// an invalid cfg.
func New(cfg retrysafe.Config) (gin.HandlerFunc, error) {
	mw, err := retrysafe.NewMiddleware(cfg)
	if err != nil {
		return nil, err
	}
	return func(c *gin.Context) {
		outer, req := c.Writer, c.Request
		ran := false
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran = true
			if gw, ok := w.(gin.ResponseWriter); ok && gw == outer {
				// Passed through unprotected: the chain runs as it would
				// without retrysafe.
				c.Request = r
				c.Next()
				return
			}
			rw := &writer{w: w, status: http.StatusOK, size: -1}
			c.Writer, c.Request = rw, r
			defer func() { c.Writer, c.Request = outer, req }()
			c.Next()
			// As Gin does after the chain: a status set and never written
			// (c.Status(202) with no body) is the answer.
			rw.WriteHeaderNow()
		})).ServeHTTP(outer, req)
		if !ran {
			c.Abort() // the middleware answered: a replay or a refusal
		}
	}, nil
}

// writer is the gin.ResponseWriter of a protected request: every method
// goes through w, the middleware's capture.
type writer struct {
	w      http.ResponseWriter
	status int
	size   int // -1 until the header is written
}

var _ gin.ResponseWriter = (*writer)(nil)

// Header returns the captured response's header.
func (w *writer) Header() http.Header { return w.w.Header() }

// WriteHeader sets the status, as Gin's writer does: it is sent with the
// first byte of the body (or WriteHeaderNow), and a status set after that
// is ignored.
func (w *writer) WriteHeader(code int) {
	if code > 0 && !w.Written() {
		w.status = code
	}
}

// WriteHeaderNow sends the status and header to the capture, once.
func (w *writer) WriteHeaderNow() {
	if !w.Written() {
		w.size = 0
		w.w.WriteHeader(w.status)
	}
}

// Write writes body bytes to the capture.
func (w *writer) Write(p []byte) (int, error) {
	w.WriteHeaderNow()
	n, err := w.w.Write(p)
	w.size += n
	return n, err
}

// WriteString writes s to the capture.
func (w *writer) WriteString(s string) (int, error) {
	w.WriteHeaderNow()
	n, err := io.WriteString(w.w, s)
	w.size += n
	return n, err
}

// Status returns the response's status (200 until one is set).
func (w *writer) Status() int { return w.status }

// Size returns the number of body bytes written, -1 before the header.
func (w *writer) Size() int { return w.size }

// Written reports whether the header was written.
func (w *writer) Written() bool { return w.size != -1 }

// Flush writes the header to the capture; nothing reaches the client
// before the handler returns (the answer is stored first).
func (w *writer) Flush() {
	w.WriteHeaderNow()
	_ = http.NewResponseController(w.w).Flush()
}

// Hijack is refused: a hijacked connection's bytes cannot be stored.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.w).Hijack()
}

// never is the CloseNotify channel: nothing is ever sent on it.
var never = make(chan bool)

// CloseNotify returns a channel that never fires: the operation outlives
// a client that hangs up, so that its result is stored for the retry.
func (w *writer) CloseNotify() <-chan bool { return never }

// Pusher returns nil: a server push could not be replayed.
func (w *writer) Pusher() http.Pusher { return nil }

// Unwrap returns the capture, for http.ResponseController.
func (w *writer) Unwrap() http.ResponseWriter { return w.w }
