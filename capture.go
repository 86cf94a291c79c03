package retrysafe

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
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

	wroteHeader bool
	overflow    bool // passing through to w; body is no longer kept
	clientGone  bool

	// stored is the response handed to a store that copies it (see
	// captureWriter.responseInPlace), valid until release.
	stored Response
	// fields, when not nil, lists header's fields (the handler is done
	// with it): the fields of a held header that equals it (see
	// sharedHeader), so that flush need not iterate over the map.
	fields []headerField
}

// captureWriters recycles capture writers with their header map and body
// buffer.
var captureWriters = sync.Pool{New: func() any { return &captureWriter{header: make(http.Header)} }}

func newCaptureWriter(w http.ResponseWriter, limit int64) *captureWriter {
	c := captureWriters.Get().(*captureWriter)
	c.w, c.limit = w, limit
	return c
}

// release resets c and returns it to the pool. The handler must have
// returned: nothing may use c afterwards. The header values were handed
// on (to the client's header and the stored response), so only the map
// is kept.
func (c *captureWriter) release() {
	if c.body.Cap() > 64<<10 {
		return
	}
	clear(c.header)
	c.body.Reset()
	c.stored, c.fields = Response{}, nil
	c.w, c.status, c.limit = nil, 0, 0
	c.wroteHeader, c.overflow, c.clientGone = false, false, false
	captureWriters.Put(c)
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
		copyHeader(c.w.Header(), c.header, 0)
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

// response returns the captured result, its headers filtered by keep. The
// header value slices are shared, not copied: the handler has returned, so
// nothing changes them any more (see copyHeader). When the kept headers
// equal those of the response stored before through the same last (most
// answers of an API carry the same few headers), the earlier map is
// reused: stored responses are read-only, so one map serves many records,
// which saves a map per stored response and the collector's work on it.
func (c *captureWriter) response(keep func(string) bool, last *sharedHeader) *Response {
	r := newResponse(c.body.Bytes())
	r.Status, r.Header = c.statusCode(), c.storedHeader(keep, last)
	return r
}

// responseInPlace is response for a store that copies the response in
// Complete and keeps at most its header map (see responseCopier): the
// Response is c's own and its body is c's buffer, so it is valid only
// until release; the header map is made as response makes it.
func (c *captureWriter) responseInPlace(keep func(string) bool, last *sharedHeader) *Response {
	c.stored = Response{Status: c.statusCode(), Header: c.storedHeader(keep, last), Body: c.body.Bytes()}
	return &c.stored
}

// storedHeader returns the header map of the stored response (see
// response).
func (c *captureWriter) storedHeader(keep func(string) bool, last *sharedHeader) http.Header {
	if held := last.reuseHeld(c.header, keep); held != nil {
		c.fields = held.fields // the same fields as c.header
		return held.h
	}
	h := last.reuse(c.header, keep)
	if h == nil {
		h = make(http.Header, len(c.header))
		for k, v := range c.header {
			if keep(k) {
				h[k] = v[:len(v):len(v)]
			}
		}
		last.v.Store(h)
	} else if len(h) == len(c.header) {
		// A header kept whole, and seen twice in a row: held with its
		// fields listed, reuseHeld compares the next ones field by field
		// instead of iterating over their maps (each iteration costs
		// about 300 instructions, the comparison of a field a third).
		held := &heldHeader{h: h, fields: make([]headerField, 0, len(h))}
		for k, v := range h {
			held.fields = append(held.fields, headerField{k, v})
		}
		last.held.Store(held)
		c.fields = held.fields
	}
	return h
}

// sharedHeader holds the header map of the last response stored through
// it, read-only, for [captureWriter.response] to reuse. It is safe for
// concurrent use.
type sharedHeader struct {
	v atomic.Value // http.Header
	// held is a header map that was reused, with its fields listed; it
	// may differ from v (a later response's).
	held atomic.Pointer[heldHeader]
}

// heldHeader is a stored response's header map, read-only, and its
// fields.
type heldHeader struct {
	h      http.Header
	fields []headerField
}

type headerField struct {
	name   string
	values []string
}

// reuseHeld returns the held header when h has exactly its fields, with
// equal values, all accepted by keep; nil otherwise. h then has no field
// that keep drops: such a header is found by reuse.
func (s *sharedHeader) reuseHeld(h http.Header, keep func(string) bool) *heldHeader {
	held := s.held.Load()
	// With as many fields as held, h has held's fields and no others
	// exactly when each of held's fields is in h.
	if held == nil || len(held.h) != len(h) {
		return nil
	}
	for _, f := range held.fields {
		v, ok := h[f.name]
		if !ok || !keep(f.name) || !slices.Equal(v, f.values) {
			return nil
		}
	}
	return held
}

// reuse returns the held map when its fields and values equal those of h
// that keep accepts, and nil otherwise.
func (s *sharedHeader) reuse(h http.Header, keep func(string) bool) http.Header {
	last, _ := s.v.Load().(http.Header)
	if last == nil || len(last) > len(h) {
		return nil
	}
	n := 0
	for k, v := range h {
		if !keep(k) {
			continue
		}
		w, ok := last[k]
		if !ok || !slices.Equal(v, w) {
			return nil
		}
		n++
	}
	if n != len(last) {
		return nil
	}
	return last
}

// newResponse returns a new Response whose Body is a copy of body (nil
// when body is nil; len == cap). A body of up to 216 bytes, as most API
// answers, lives in the same allocation as the Response, in one of three
// sizes (64, 128 and 256 bytes in all), so that it wastes little.
func newResponse(body []byte) *Response {
	var r *Response
	var buf []byte
	switch n := len(body); {
	case body == nil:
		return &Response{}
	case n <= 24:
		s := new(struct {
			r Response
			b [24]byte
		})
		r, buf = &s.r, s.b[:n:n]
	case n <= 88:
		s := new(struct {
			r Response
			b [88]byte
		})
		r, buf = &s.r, s.b[:n:n]
	case n <= 216:
		s := new(struct {
			r Response
			b [216]byte
		})
		r, buf = &s.r, s.b[:n:n]
	default:
		r, buf = new(Response), make([]byte, n)
	}
	copy(buf, body)
	r.Body = buf
	return r
}

// flush sends the captured response to the client (unless it already went
// through in pass-through mode).
func (c *captureWriter) flush() {
	if c.overflow {
		return
	}
	var spare []string
	if c.fields != nil {
		spare = copyFields(c.w.Header(), c.fields, 1)
	} else {
		spare = copyHeader(c.w.Header(), c.header, 1)
	}
	writeBody(c.w, c.statusCode(), c.body.Bytes(), spare)
}

// copyHeader sets dst's values to copies of src's: what is written to the
// client's header never shares memory with the captured or stored
// response, whatever a server or outer middleware does to it. The copies
// of fields with one value each (the usual case) share one allocation,
// made before a single pass over src (a map iteration costs about as much
// as the copy here); a field with more values than the allocation has room
// left gets its own. The shared allocation holds extra more values,
// returned as spare (each a one-element slice of capacity one, for the
// caller's own headers).
func copyHeader(dst, src http.Header, extra int) (spare []string) {
	values := make([]string, len(src)+extra)
	room := len(src) // values not yet used, extra aside
	for k, v := range src {
		if len(v) > room {
			c := make([]string, len(v))
			copy(c, v)
			dst[k] = c
			continue
		}
		m := copy(values, v)
		dst[k] = values[:m:m]
		values, room = values[m:], room-m
	}
	return values[room:]
}

// copyFields is copyHeader from a list of src's fields (see
// captureWriter.fields).
func copyFields(dst http.Header, src []headerField, extra int) (spare []string) {
	values := make([]string, len(src)+extra)
	room := len(src)
	for _, f := range src {
		if len(f.values) > room {
			c := make([]string, len(f.values))
			copy(c, f.values)
			dst[f.name] = c
			continue
		}
		m := copy(values, f.values)
		dst[f.name] = values[:m:m]
		values, room = values[m:], room-m
	}
	return values[room:]
}

// writeBody writes status and body with their Content-Length. Its value
// goes into spare[0] when spare has room (see copyHeader).
func writeBody(w http.ResponseWriter, status int, body []byte, spare []string) {
	if status != http.StatusNoContent && status != http.StatusNotModified && status >= 200 {
		setOne(w.Header(), "Content-Length", strconv.Itoa(len(body)), spare)
	}
	w.WriteHeader(status)
	if len(body) > 0 {
		_, _ = w.Write(body)
	}
}

// setOne sets h[key] (key in canonical form) to the single value v, kept
// in spare[0] when spare has room: Header.Set without its allocation.
func setOne(h http.Header, key, v string, spare []string) {
	if len(spare) == 0 {
		h[key] = []string{v}
		return
	}
	spare[0] = v
	h[key] = spare[:1:1]
}
