package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultRetryOn is the retry decision [Transport] uses when RetryOn is nil.
// It is exported so a custom RetryOn can extend it.
//
// For an error (resp is nil) it retries network failures (refused or reset
// connections, EOF before an answer, DNS errors) and attempt timeouts, but not
// TLS certificate failures, which a retry cannot fix.
//
// For a response, an explicit hint from the server decides first:
// Retrysafe-Should-Retry or Stripe-Should-Retry set to "true" or "false".
// Otherwise it retries 408, 409 (the original is still in flight), 429, 502,
// 503 and 504, unless the answer was replayed from the server's record
// (Idempotent-Replayed: true), since the same answer would come back. Every
// other status is final. In particular 500 is not retried: the operation may
// have run, and a server that records its answers would replay the same 500
// anyway. Servers that want a 500 retried can say so with the hint header.
func DefaultRetryOn(resp *http.Response, err error) bool {
	if err != nil {
		return retryableError(err)
	}
	if resp == nil {
		return false
	}
	for _, h := range [...]string{HeaderShouldRetry, HeaderStripeShouldRetry} {
		switch strings.ToLower(strings.TrimSpace(resp.Header.Get(h))) {
		case "true":
			return true
		case "false":
			return false
		}
	}
	if Replayed(resp) {
		return false
	}
	switch resp.StatusCode {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

func retryableError(err error) bool {
	var (
		verr *tls.CertificateVerificationError
		uerr x509.UnknownAuthorityError
		herr x509.HostnameError
		cerr x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &verr), errors.As(err, &uerr), errors.As(err, &herr), errors.As(err, &cerr):
		return false
	}
	return true
}

// retryAfter parses a Retry-After header: delay-seconds or an HTTP-date.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// backoff returns the wait before retry n (1 for the first retry): the base
// InitialBackoff·2^(n-1), capped at MaxBackoff, with equal jitter: a value in
// [base/2, base].
func backoff(initial, ceiling time.Duration, n int, jitter float64) time.Duration {
	d := min(initial, ceiling)
	for i := 1; i < n && d < ceiling; i++ {
		d *= 2
	}
	d = min(d, ceiling)
	half := d / 2
	return half + time.Duration(jitter*float64(d-half))
}
