package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/httpmethod"
	"github.com/retrysafe/retrysafe/internal/storeheader"
)

// DefaultResolveTimeout bounds one call to a route's resolve URL
// ([Policy.ResolveTimeout]). The call runs while a retry waits for its
// answer, so it is short; a resolver that does not answer in time keeps
// the record blocked, which is safe.
const DefaultResolveTimeout = retrysafe.DefaultResolveTimeout

// maxResolveAnswer bounds the resolver's JSON answer beyond the stored
// body it carries (base64 grows it by a third): headers, outcome, status.
const maxResolveAnswer = 64 << 10

// Outcomes a resolve URL answers with (DESIGN.md, Unknown outcomes).
const (
	resolveDone    = "done"     // it happened: store and replay this answer
	resolveNotDone = "not_done" // it did not happen: the takeover runs
	resolveUnknown = "unknown"  // cannot tell: keep the record blocked
)

// resolveAnswer is what a resolve URL said, as the gateway reads it.
type resolveAnswer struct {
	outcome string              // resolveDone, resolveNotDone or resolveUnknown
	resp    *retrysafe.Response // with resolveDone
	why     string              // with resolveUnknown: for the log, never the client
}

// resolveRequest is the body of a resolve call.
type resolveRequest struct {
	Key     string `json:"key"`
	Attempt int    `json:"attempt"`
	Method  string `json:"method"`
	Path    string `json:"path"`
	Query   string `json:"query"`
}

// resolveReply is the JSON a resolve URL answers.
type resolveReply struct {
	Outcome string              `json:"outcome"`
	Status  int                 `json:"status"`
	Headers map[string][]string `json:"headers"`
	Body    *string             `json:"body"`
}

// resolver asks a route's resolve URL whether the operation of an
// attempt whose outcome is unknown happened.
type resolver struct {
	url     *url.URL
	client  *http.Client
	timeout time.Duration
	maxBody int64 // the route's MaxResponseBody: the largest body stored
}

// unsentHeaders are the retry's headers a resolve call does not carry:
// they describe the retry's body or connection, which the call does not
// have, or are set by the gateway.
var unsentHeaders = []string{
	"Content-Length", "Content-Type", "Content-Encoding", "Transfer-Encoding", "Expect", "Trailer", "Te",
	"Connection", "Keep-Alive", "Upgrade", "Proxy-Connection", "Proxy-Authorization",
	retrysafe.HeaderKey, "X-Idempotency-Key", HeaderAttempt,
}

// ask calls the resolve URL for rec (a processing record whose attempt
// has an unknown outcome). r is the retry that found it, whose headers
// (Authorization among them) the call carries so that the upstream knows
// the caller; nil for the completer, which has no retry: the method and
// path are then the route pattern's. Every failure is an unknown answer:
// the record stays blocked.
func (rv *resolver) ask(ctx context.Context, rec *retrysafe.Record, r *http.Request, pattern string) resolveAnswer {
	ctx, cancel := context.WithTimeout(ctx, rv.timeout)
	defer cancel()
	q := resolveRequest{Key: rec.Key, Attempt: rec.Attempt}
	header := http.Header{}
	if r != nil {
		q.Method, q.Path, q.Query = r.Method, r.URL.Path, r.URL.RawQuery
		header = r.Header.Clone()
		for _, h := range unsentHeaders {
			header.Del(h)
		}
	} else {
		q.Method, q.Path = patternParts(pattern)
	}
	body, _ := json.Marshal(q) // strings and an int: cannot fail
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rv.url.String(), bytes.NewReader(body))
	if err != nil {
		return unknownBecause("building the request: %v", err)
	}
	req.Header = header
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(retrysafe.HeaderKey, rec.Key)
	req.Header.Set(HeaderAttempt, strconv.Itoa(rec.Attempt))
	resp, err := rv.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return unknownBecause("no answer within %s", rv.timeout)
		}
		return unknownBecause("%v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return unknownBecause("status %d, want 200", resp.StatusCode)
	}
	limit := maxResolveAnswer + (rv.maxBody+2)/3*4
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	switch {
	case err != nil && ctx.Err() != nil:
		return unknownBecause("no whole answer within %s", rv.timeout)
	case err != nil:
		return unknownBecause("reading the answer: %v", err)
	case int64(len(raw)) > limit:
		return unknownBecause("answer over %d bytes (the route's max_response_body, in base64, plus %d)", limit, maxResolveAnswer)
	}
	return parseResolveReply(raw, rv.maxBody)
}

// parseResolveReply reads a resolve URL's 200 answer. Anything but a
// well-formed done or not_done is unknown.
func parseResolveReply(raw []byte, maxBody int64) resolveAnswer {
	var rep resolveReply
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&rep); err != nil {
		return unknownBecause("answer is not the JSON object of the protocol: %v", err)
	}
	if dec.More() {
		return unknownBecause("answer holds more than one JSON value")
	}
	switch rep.Outcome {
	case resolveNotDone:
		return resolveAnswer{outcome: resolveNotDone}
	case resolveDone:
	case resolveUnknown:
		return unknownBecause("the resolver says unknown")
	default:
		return unknownBecause("outcome %q is not done, not_done or unknown", rep.Outcome)
	}
	if rep.Status < 100 || rep.Status > 599 {
		return unknownBecause("done with status %d (want 100-599)", rep.Status)
	}
	resp := &retrysafe.Response{Status: rep.Status, Header: http.Header{}}
	for name, vals := range rep.Headers {
		if !validHeaderName(name) {
			return unknownBecause("done with header name %q", name)
		}
		for _, v := range vals {
			if strings.ContainsAny(v, "\r\n\x00") {
				return unknownBecause("done with a control character in header %s", name)
			}
		}
		if storeheader.Default(name) {
			resp.Header[http.CanonicalHeaderKey(name)] = append(resp.Header[http.CanonicalHeaderKey(name)], vals...)
		}
	}
	if rep.Body != nil {
		b, err := base64.StdEncoding.DecodeString(*rep.Body)
		if err != nil {
			return unknownBecause("done with a body that is not base64: %v", err)
		}
		if int64(len(b)) > maxBody {
			return unknownBecause("done with a body of %d bytes, over the route's max_response_body %d", len(b), maxBody)
		}
		resp.Body = b
	}
	return resolveAnswer{outcome: resolveDone, resp: resp}
}

func unknownBecause(format string, args ...any) resolveAnswer {
	return resolveAnswer{outcome: resolveUnknown, why: fmt.Sprintf(format, args...)}
}

// patternParts splits a route pattern ("POST /payments", "/x") into its
// method and path.
func patternParts(pattern string) (method, path string) {
	if m := patternMethod(pattern); m != "" {
		return httpmethod.Canonical(m), strings.TrimSpace(pattern[len(m):])
	}
	return "", pattern
}

// ParseResolveURL checks a resolve URL (--resolve-url, resolve_url): an
// absolute http or https URL with a host; "" means none.
func ParseResolveURL(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an http:// or https:// URL with a host", s)
	}
	return u, nil
}

// ParseOnUnknown parses --on-unknown / on_unknown: takeover or block
// (retrysafe.OnUnknownTakeover, retrysafe.OnUnknownBlock).
func ParseOnUnknown(s string) (retrysafe.UnknownPolicy, error) {
	switch v := retrysafe.UnknownPolicy(strings.TrimSpace(s)); v {
	case retrysafe.OnUnknownTakeover, retrysafe.OnUnknownBlock:
		return v, nil
	}
	return "", fmt.Errorf("%q is not %q or %q", s, retrysafe.OnUnknownTakeover, retrysafe.OnUnknownBlock)
}
