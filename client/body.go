package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// ErrBodyNotReplayable is wrapped in the error returned when a request that
// would have been retried was not, because its body cannot be sent again.
var ErrBodyNotReplayable = errors.New("client: request body cannot be replayed")

// errGetBody wraps a failure of the request's GetBody: the retry cannot be
// sent, and no later one could be.
var errGetBody = errors.New("client: request GetBody failed")

// replayBody decides how each attempt gets its request body.
type replayBody struct {
	orig      *http.Request
	buf       []byte // buffered body, when buffered
	buffered  bool
	once      io.ReadCloser // body that can be sent only once
	whyNot    string        // why the body is not replayable; "" if it is
	firstUsed bool
}

func newReplayBody(req *http.Request, limit int64) *replayBody {
	b := &replayBody{orig: req}
	switch {
	case req.Body == nil || req.Body == http.NoBody || req.GetBody != nil:
		return b
	case limit < 0:
		b.whyNot = "it has no GetBody and buffering is disabled (MaxBufferedBody < 0)"
		b.once = req.Body
		return b
	case req.ContentLength > limit:
		b.whyNot = fmt.Sprintf("it has no GetBody and its length %d exceeds MaxBufferedBody (%d bytes)", req.ContentLength, limit)
		b.once = req.Body
		return b
	}
	buf, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	switch {
	case err != nil:
		b.whyNot = fmt.Sprintf("it has no GetBody and reading it failed: %v", err)
		b.once = readCloser{io.MultiReader(bytes.NewReader(buf), errReader{err}), req.Body}
	case int64(len(buf)) > limit:
		b.whyNot = fmt.Sprintf("it has no GetBody and is larger than MaxBufferedBody (%d bytes)", limit)
		b.once = readCloser{io.MultiReader(bytes.NewReader(buf), req.Body), req.Body}
	default:
		_ = req.Body.Close()
		b.buf, b.buffered = buf, true
	}
	return b
}

// apply sets the body of r, a clone of the original request, for one attempt.
func (b *replayBody) apply(r *http.Request) error {
	first := !b.firstUsed
	b.firstUsed = true
	switch {
	case b.buffered:
		buf := b.buf
		r.ContentLength = int64(len(buf))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
		if len(buf) == 0 {
			r.Body = http.NoBody
		} else {
			r.Body, _ = r.GetBody()
		}
	case b.once != nil:
		if !first {
			return ErrBodyNotReplayable // never reached: the loop does not retry
		}
		r.Body, r.GetBody = b.once, nil
	case b.orig.Body == nil || b.orig.Body == http.NoBody:
		r.Body = b.orig.Body
	case first:
		r.Body = b.orig.Body
	default:
		body, err := b.orig.GetBody()
		if err != nil {
			return fmt.Errorf("%w: %w", errGetBody, err)
		}
		r.Body = body
	}
	return nil
}

// close closes the original body when no attempt took ownership of it.
func (b *replayBody) close() {
	if b.firstUsed {
		return
	}
	if b.once != nil {
		_ = b.once.Close()
	} else if b.orig.Body != nil && !b.buffered {
		_ = b.orig.Body.Close()
	}
}

type readCloser struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
