package gateway

import (
	"log/slog"
	"net/http"
	"time"
)

// Defaults of the proxy listener's limits (see [Config] and
// [Gateway.NewServer]).
const (
	// DefaultReadTimeout bounds reading one whole request, body included.
	// At the default 1 MiB body limit it asks a client for about 35 KB/s.
	DefaultReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds writing one answer to the client.
	DefaultWriteTimeout = 30 * time.Second
	// ReadHeaderTimeout bounds reading a request's line and headers (or
	// the read timeout, if that is shorter).
	ReadHeaderTimeout = 10 * time.Second
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request.
	IdleTimeout = 2 * time.Minute
	// MaxHeaderBytes bounds a request's line and headers.
	MaxHeaderBytes = 64 << 10
)

// NewServer returns an http.Server that serves g with the proxy
// listener's limits:
//
//   - ReadTimeout (Config.ReadTimeout): the whole request — line, headers
//     and body — must arrive within it, counted from its first byte. A
//     client that stalls mid-body is cut off: its connection is closed,
//     nothing is forwarded, no record is left (the key is claimed only
//     after the whole body has arrived), and it gets 408 if it still
//     reads. Once the body has been read, net/http lifts the deadline,
//     so waiting for the upstream never counts against it.
//   - WriteTimeout (Config.WriteTimeout): the answer must be written
//     within it, counted from when its status line starts to be written
//     (see [Gateway.ServeHTTP]); time spent waiting for the upstream and
//     the store is not counted. A client that does not read is cut off;
//     a protected request's result was stored before its answer was
//     written, so a retry gets it.
//   - ReadHeaderTimeout (10s, or ReadTimeout if shorter), IdleTimeout
//     (2m) and MaxHeaderBytes (64 KiB).
//
// Serve it on a listener of your own; Shutdown and Close work as usual.
func (g *Gateway) NewServer() *http.Server {
	return &http.Server{
		Handler:           g,
		ReadTimeout:       g.cfg.ReadTimeout,
		ReadHeaderTimeout: min(ReadHeaderTimeout, g.cfg.ReadTimeout),
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(g.logger.Handler(), slog.LevelWarn),
	}
}

// withDeadlines returns a writer that sets the connection's write deadline
// to Config.WriteTimeout when the answer starts to be written. (The read
// deadline, http.Server.ReadTimeout, needs no help: net/http lifts it once
// the body has been read, so it never fires while the upstream works.)
// Writers without deadline support (a test recorder, say) are left as they
// are.
func (g *Gateway) withDeadlines(w http.ResponseWriter) http.ResponseWriter {
	return &deadlineWriter{ResponseWriter: w, timeout: g.cfg.WriteTimeout}
}

// deadlineWriter sets the write deadline when the answer starts to be
// written: at the first final (non-1xx) status, Write or Flush.
type deadlineWriter struct {
	http.ResponseWriter
	timeout time.Duration
	armed   bool
}

func (w *deadlineWriter) arm() {
	if !w.armed {
		w.armed = true
		_ = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Now().Add(w.timeout))
	}
}

func (w *deadlineWriter) WriteHeader(code int) {
	if code >= 200 {
		w.arm()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(p)
}

// FlushError flushes the client, for streaming and http.ResponseController.
func (w *deadlineWriter) FlushError() error {
	w.arm()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush flushes the client.
func (w *deadlineWriter) Flush() { _ = w.FlushError() }

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
