package retrysafe

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"strconv"
)

// captureWriter records the handler's response so it can be stored before
// the client sees it. It deliberately does not pass Flush, ReadFrom or
// Hijack through while capturing: doing so would send a status and headers
// to the client that were never stored (the bug where a client gets 200
// instead of 201 and the stored body is empty).
//
// When the body grows past limit the writer switches to pass-through: what
// was buffered and everything after goes straight to the client, and only
// the status and headers are kept.
type captureWriter struct {
	w      http.ResponseWriter
	header http.Header
	status int
	body   bytes.Buffer
	limit  int64
	resp   Response // what response returns, made with the writer

	wroteHeader bool
	overflow    bool // passing through to w; body is no longer kept
	clientGone  bool
}

func (c *captureWriter) Header() http.Header { return c.header }

func (c *captureWriter) WriteHeader(code int) {
	if c.wroteHeader {
		return
	}
	if code >= 100 && code <= 199 {
		// Informational answers (103 Early Hints) are not part of the
		// stored result; drop them rather than commit the real response.
		return
	}
	c.wroteHeader = true
	c.status = code
}

func (c *captureWriter) Write(p []byte) (int, error) {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	if c.overflow {
		c.passThrough(p)
		return len(p), nil
	}
	if int64(c.body.Len()+len(p)) > c.limit {
		c.overflow = true
		copyHeader(c.w.Header(), c.header)
		c.w.WriteHeader(c.status)
		c.passThrough(c.body.Bytes())
		c.body = bytes.Buffer{}
		c.passThrough(p)
		return len(p), nil
	}
	return c.body.Write(p)
}

// passThrough writes to the client. A client that hung up does not fail the
// handler: the operation must finish so its (unstored) outcome is recorded.
func (c *captureWriter) passThrough(p []byte) {
	if c.clientGone {
		return
	}
	if _, err := c.w.Write(p); err != nil {
		c.clientGone = true
	}
}

// Flush is a no-op while capturing; in pass-through it flushes the client.
func (c *captureWriter) Flush() { _ = c.FlushError() }

// FlushError is what http.ResponseController calls.
func (c *captureWriter) FlushError() error {
	if !c.overflow {
		return nil
	}
	return http.NewResponseController(c.w).Flush()
}

var errHijack = errors.New("retrysafe: a protected response cannot be hijacked")

// Hijack refuses: a hijacked connection's bytes cannot be stored.
func (c *captureWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) { return nil, nil, errHijack }

// Unwrap gives http.ResponseController the underlying writer for deadlines.
func (c *captureWriter) Unwrap() http.ResponseWriter { return c.w }

func (c *captureWriter) statusCode() int {
	if c.status == 0 {
		return http.StatusOK
	}
	return c.status
}

// response returns the captured result to store: its status, the headers
// that keep accepts and its body. Nothing is copied here: the store copies
// what it keeps before Complete returns ([CompleteParams].Response), which
// is the one copy of a response. The header is the capture's own map when
// keep drops none of its names, else a map of the kept names (sharing
// their values); the body is the capture buffer, from which the client is
// written too.
func (c *captureWriter) response(keep func(string) bool) *Response {
	h := c.header
	for k := range c.header {
		if !keep(k) {
			h = nil
			break
		}
	}
	if h == nil {
		h = make(http.Header, len(c.header))
		for k, v := range c.header {
			if keep(k) {
				h[k] = v
			}
		}
	}
	c.resp = Response{Status: c.statusCode(), Header: h, Body: c.body.Bytes()}
	return &c.resp
}

// flush sends the captured response to the client (unless it already went
// through in pass-through mode). The client's header gets the captured
// values themselves: the store holds its own copy of what it kept.
func (c *captureWriter) flush() {
	if c.overflow {
		return
	}
	dst := c.w.Header()
	for k, v := range c.header {
		dst[k] = v
	}
	writeBody(c.w, c.statusCode(), c.body.Bytes())
}

// copyHeader sets dst's values to copies of src's, all in one backing
// array (each slice capped, so an append to one never reaches another).
func copyHeader(dst, src http.Header) {
	n := 0
	for _, v := range src {
		n += len(v)
	}
	values := make([]string, n)
	for k, v := range src {
		c := values[:len(v):len(v)]
		copy(c, v)
		values = values[len(v):]
		dst[k] = c
	}
}

// writeBody writes status and body with their Content-Length.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	if hasLength(status) {
		w.Header()["Content-Length"] = []string{strconv.Itoa(len(body))} // a canonical name: no Set
	}
	w.WriteHeader(status)
	if len(body) > 0 {
		_, _ = w.Write(body)
	}
}

// hasLength reports whether an answer with status carries a
// Content-Length.
func hasLength(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified && status >= 200
}
