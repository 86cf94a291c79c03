package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/retrysafe/retrysafe/internal/httpmethod"
)

// Defaults for the zero values of [Transport]'s fields.
const (
	DefaultMaxAttempts     = 3 // the first attempt and 2 retries, as Stripe's SDKs do
	DefaultInitialBackoff  = 500 * time.Millisecond
	DefaultMaxBackoff      = 5 * time.Second
	DefaultMaxElapsed      = 30 * time.Second
	DefaultMaxBufferedBody = 1 << 20 // 1 MiB
)

// ErrAttemptTimeout is wrapped in the error of an attempt that got no
// response headers within [Transport.AttemptTimeout].
var ErrAttemptTimeout = errors.New("client: attempt timed out")

// Transport is an [http.RoundTripper] that gives protected requests an
// Idempotency-Key and retries them with that same key. Use it as the
// Transport of an [http.Client]. A Transport is safe for concurrent use; its
// fields must not change once it is in use. The zero value is ready to use,
// each zero field meaning the documented default.
//
// # Keys
//
// Before the first attempt of a request whose method is in Methods, the key
// is fixed, in this order: the request's own Idempotency-Key header, kept
// exactly as given; else the key from the request's context ([WithKey],
// [WithDerivedKey]); else a new random UUIDv4 from [NewKey]. Keys the
// transport adds are written bare (8e03978e-…), as Stripe's clients do,
// rather than as the draft standard's quoted Structured-Field string;
// retrysafe's servers accept both ([retrysafe.ParseKey]). Only a key that
// cannot be sent bare (one with spaces, quotes, commas or semicolons) is
// written quoted, as a Structured-Field String. Every attempt carries the same
// key. The caller's request is never
// modified: each attempt is a clone, and [KeyFromResponse] reads the key
// from the clone in resp.Request.
//
// A key the transport makes up lives for one RoundTrip: [http.Client] follows
// a 307 or 308 redirect with a new RoundTrip, hence a new key, and so does a
// caller that retries the whole call. When an operation must keep its key
// beyond one call (redirects, retries after a restart), create the key with
// [NewKey], persist it with the pending operation, and pass it with
// [WithKey] or the header.
//
// Requests with other methods are passed to Base unchanged, once.
//
// # Retries
//
// After each attempt RetryOn ([DefaultRetryOn] when nil) decides whether the
// outcome is worth retrying. A retry is made only if all of these hold:
// fewer than MaxAttempts attempts were made; the request body can be sent
// again; the next attempt would start no later than MaxElapsed after the
// first one began; and the request's context has not ended.
//
// The wait before retry n is InitialBackoff·2^(n-1), capped at MaxBackoff,
// with equal jitter: a uniformly random value between half of that and all
// of it. When a retried response carries Retry-After (seconds or an
// HTTP-date), that delay is used instead, whatever its size: it is not capped
// by MaxBackoff, only bounded by MaxElapsed — if it would start the next
// attempt after MaxElapsed, the response is returned instead.
//
// The body of a response that is retried is drained (up to 64 KiB) and
// closed so the connection can be reused. When the retries stop, the last
// response is returned as is, or the last error, wrapped with the reason
// when a retry was wanted but not made. When the context ends the transport
// returns at once, even during a wait, with the context's error.
//
// # Bodies
//
// A request body is replayed with GetBody when the request has one (requests
// built by [http.NewRequest] from a *bytes.Buffer, *bytes.Reader or
// *strings.Reader do). Other bodies are read into memory first, up to
// MaxBufferedBody bytes. A body that is larger, or cannot be read, is
// streamed once and the request is never retried: the reason is in
// [AttemptInfo].Reason and, when the attempt failed with an error, in the
// returned error, which then matches [ErrBodyNotReplayable].
type Transport struct {
	// Base sends each attempt. Nil means http.DefaultTransport.
	Base http.RoundTripper

	// Methods lists the protected methods. Nil means POST and PATCH.
	Methods []string

	// MaxAttempts is the total number of attempts, the first included.
	// Zero or less means DefaultMaxAttempts (3); 1 disables retries.
	MaxAttempts int

	// InitialBackoff is the base wait before the first retry, doubled for
	// each later one. Zero means DefaultInitialBackoff (500ms).
	InitialBackoff time.Duration

	// MaxBackoff caps the base wait. Zero means DefaultMaxBackoff (5s).
	MaxBackoff time.Duration

	// MaxElapsed bounds the time from the start of the first attempt to the
	// start of the last: no attempt starts later. Zero means
	// DefaultMaxElapsed (30s).
	MaxElapsed time.Duration

	// AttemptTimeout bounds each attempt until its response headers arrive;
	// an attempt that times out is cancelled and retried. Reading the
	// response body is bounded only by the request's context. Zero means no
	// limit per attempt.
	AttemptTimeout time.Duration

	// MaxBufferedBody is the largest request body without GetBody that is
	// buffered in memory so it can be replayed. Zero means
	// DefaultMaxBufferedBody (1 MiB); negative disables buffering.
	MaxBufferedBody int64

	// RetryOn decides whether the outcome of an attempt is worth retrying:
	// resp is nil when err is not. Nil means [DefaultRetryOn]. It is called
	// only for protected requests, and not when the request's context has
	// ended.
	RetryOn func(resp *http.Response, err error) bool

	// OnAttempt, when not nil, is called after every attempt of a protected
	// request, before any wait, for logging or metrics. It runs on the
	// request's goroutine and must not read or close the response body.
	OnAttempt func(AttemptInfo)

	// For tests: jitter in [0, 1), sleeping, and the clock.
	jitter func() float64
	sleep  func(ctx context.Context, d time.Duration) error
	now    func() time.Time
}

// AttemptInfo describes one attempt of a protected request, for
// [Transport.OnAttempt].
type AttemptInfo struct {
	// Attempt is 1 for the first attempt, 2 for the first retry, and so on.
	Attempt int
	// Key is the idempotency key sent, the same on every attempt (decoded,
	// as [KeyFromResponse] returns it). It identifies an operation and may
	// grant access to its stored answer: avoid logging it where secrets are
	// not logged.
	Key string
	// Request is the attempt's request (a clone of the caller's). Do not
	// modify it or read its body.
	Request *http.Request
	// StatusCode is the response status, or 0 when the attempt failed.
	StatusCode int
	// Err is the attempt's error, or nil when a response arrived.
	Err error
	// Replayed reports whether the response was replayed by the server from
	// its record (Idempotent-Replayed: true).
	Replayed bool
	// Retry reports whether another attempt follows, after Delay.
	Retry bool
	// Delay is the wait before the next attempt, when Retry is true.
	Delay time.Duration
	// Elapsed is the time since the first attempt started.
	Elapsed time.Duration
	// Reason says why an outcome that RetryOn would retry is not retried:
	// attempts used up, MaxElapsed reached, body not replayable, context
	// ended. It is empty when Retry is true and when the outcome is final.
	Reason string
}

var _ http.RoundTripper = (*Transport)(nil)

// RoundTrip implements [http.RoundTripper]; see [Transport] for what it does.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if !t.protected(req.Method) {
		return base.RoundTrip(req)
	}
	ctx := req.Context()
	// key is the key itself, for AttemptInfo; wire is the header value to
	// set, or "" to keep the caller's header.
	key, wire := decodeKey(req.Header.Get(HeaderKey)), ""
	if key == "" {
		if key = keyFromContext(ctx); key != "" {
			if why := validKey(key); why != "" {
				if req.Body != nil {
					_ = req.Body.Close()
				}
				return nil, fmt.Errorf("client: idempotency key from context is %s", why)
			}
		} else {
			key = NewKey()
		}
		wire = encodeKey(key)
	}
	body := newReplayBody(req, t.maxBufferedBody())
	defer body.close()

	maxAttempts := positive(t.MaxAttempts, DefaultMaxAttempts)
	maxElapsed := positive(t.MaxElapsed, DefaultMaxElapsed)
	retryOn := t.RetryOn
	if retryOn == nil {
		retryOn = DefaultRetryOn
	}
	start := t.clock()
	for attempt := 1; ; attempt++ {
		areq, resp, err := t.attempt(ctx, base, req, body, wire)
		info := AttemptInfo{Attempt: attempt, Key: key, Request: areq, Err: err}
		if resp != nil {
			info.StatusCode, info.Replayed = resp.StatusCode, Replayed(resp)
		}
		if errors.Is(err, errGetBody) {
			info.Elapsed, info.Reason = t.clock().Sub(start), "GetBody failed"
			t.report(info)
			return nil, err
		}
		if cerr := ctx.Err(); cerr != nil && err != nil {
			info.Elapsed, info.Reason = t.clock().Sub(start), "context ended"
			t.report(info)
			return nil, contextError(cerr, err)
		}
		wanted := retryOn(resp, err)
		var delay time.Duration
		if wanted {
			delay = t.delay(attempt, resp)
		}
		info.Elapsed = t.clock().Sub(start)
		switch {
		case !wanted:
		case ctx.Err() != nil:
			info.Reason = "context ended"
		case body.whyNot != "":
			info.Reason = "request body cannot be replayed: " + body.whyNot
		case attempt >= maxAttempts:
			info.Reason = fmt.Sprintf("%d attempts made (MaxAttempts)", attempt)
		case info.Elapsed+delay > maxElapsed:
			info.Reason = fmt.Sprintf("next attempt would start %s after the first, beyond MaxElapsed (%s)", (info.Elapsed + delay).Round(time.Millisecond), maxElapsed)
		default:
			info.Retry, info.Delay = true, delay
		}
		t.report(info)

		if !info.Retry {
			if wanted && info.Reason == "context ended" {
				closeBody(resp)
				return nil, ctx.Err()
			}
			if err != nil && info.Reason != "" {
				if body.whyNot != "" {
					return nil, fmt.Errorf("client: not retried: %w: %s: %w", ErrBodyNotReplayable, body.whyNot, err)
				}
				return nil, fmt.Errorf("client: not retried: %s: %w", info.Reason, err)
			}
			return resp, err
		}
		drainBody(resp)
		if err := t.wait(ctx, delay); err != nil {
			return nil, err
		}
	}
}

// CloseIdleConnections closes the idle connections of Base, when it can, so
// that [http.Client.CloseIdleConnections] reaches through the Transport.
func (t *Transport) CloseIdleConnections() {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if c, ok := base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// attempt sends one clone of req with key and a fresh body. It returns the
// clone it sent.
func (t *Transport) attempt(ctx context.Context, base http.RoundTripper, req *http.Request, body *replayBody, wire string) (*http.Request, *http.Response, error) {
	actx, cancel := ctx, context.CancelFunc(func() {})
	var timer *time.Timer
	if t.AttemptTimeout > 0 {
		actx, cancel = context.WithCancel(ctx)
		timer = time.AfterFunc(t.AttemptTimeout, cancel)
	}
	r := req.Clone(actx)
	if wire != "" {
		r.Header.Set(HeaderKey, wire)
	}
	if err := body.apply(r); err != nil {
		cancel()
		return r, nil, err
	}
	resp, err := base.RoundTrip(r)
	timedOut := timer != nil && !timer.Stop()
	if timedOut && ctx.Err() == nil {
		closeBody(resp)
		cancel()
		if err == nil {
			err = context.DeadlineExceeded
		}
		return r, nil, fmt.Errorf("%w after %s: %w", ErrAttemptTimeout, t.AttemptTimeout, err)
	}
	if err != nil {
		cancel()
		return r, nil, err
	}
	if resp.Request == nil {
		resp.Request = r
	}
	if timer != nil {
		resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	}
	return r, resp, nil
}

func (t *Transport) protected(method string) bool {
	if method == "" {
		method = http.MethodGet
	}
	return httpmethod.Protected(t.Methods, method)
}

// delay returns the wait before the retry that follows attempt.
func (t *Transport) delay(attempt int, resp *http.Response) time.Duration {
	if resp != nil {
		if d, ok := retryAfter(resp.Header, t.clock()); ok {
			return d
		}
	}
	j := rand.Float64
	if t.jitter != nil {
		j = t.jitter
	}
	return backoff(positive(t.InitialBackoff, DefaultInitialBackoff), positive(t.MaxBackoff, DefaultMaxBackoff), attempt, j())
}

func (t *Transport) maxBufferedBody() int64 {
	if t.MaxBufferedBody == 0 {
		return DefaultMaxBufferedBody
	}
	return t.MaxBufferedBody
}

func (t *Transport) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

func (t *Transport) wait(ctx context.Context, d time.Duration) error {
	if t.sleep != nil {
		return t.sleep(ctx, d)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

func (t *Transport) report(info AttemptInfo) {
	if t.OnAttempt != nil {
		t.OnAttempt(info)
	}
}

func positive[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// contextError returns err if it already says that the context ended, or the
// context's error joined with it.
func contextError(cerr, err error) error {
	if errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w (attempt error: %w)", cerr, err)
}

func closeBody(resp *http.Response) {
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
}

// drainBody reads a little of a discarded response so its connection can be
// reused, then closes it.
func drainBody(resp *http.Response) {
	if resp != nil && resp.Body != nil {
		_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
		_ = resp.Body.Close()
	}
}

// cancelBody ends an attempt's context once its response body is done.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.cancel()
	}
	return n, err
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
