// Package webhook verifies the signatures of incoming webhook deliveries
// (Standard Webhooks, Stripe, GitHub, Shopify), so that retrysafe can run
// each event once: verify first, then claim the event's id as the key.
//
// A sender retries a delivery until it gets a 2xx, so the same event
// arrives again after a slow or lost answer. Put [Verifier.Middleware] in
// front of retrysafe's middleware, with [Verifier.Key] as Config.Key and a
// scope per sender:
//
//	v, err := webhook.New(webhook.Config{Scheme: webhook.Stripe, Secrets: []string{secret}})
//	mw, err := retrysafe.NewMiddleware(retrysafe.Config{
//		Store: store, Key: v.Key(), RequireKey: true,
//		Scope: func(*http.Request) (string, error) { return "stripe", nil },
//	})
//	http.Handle("POST /webhooks/stripe", v.Middleware(webhook.MiddlewareConfig{})(mw(handler)))
//
// A delivery that fails verification gets 401 problem type
// webhook-signature and reaches nothing behind the verifier: nothing runs,
// nothing is stored, and a forger cannot claim an event id ahead of the
// sender. Comparisons run in constant time; the body limit is checked
// before verifying; a signed timestamp (Standard Webhooks, Stripe) must
// be within the tolerance (default 5 minutes) either way. Several secrets
// are tried in turn, so a secret can be rotated without refusing
// deliveries signed with the old one ([Verifier.SetSecrets] swaps them
// while serving). The package needs only the standard library.
package webhook

import (
	"bytes"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retrysafe/retrysafe"
)

// Scheme names a sender's signature scheme.
type Scheme string

// The schemes a Verifier knows.
const (
	// Standard is Standard Webhooks (Svix and others): webhook-id,
	// webhook-timestamp and webhook-signature, an HMAC-SHA256 (v1) with a
	// whsec_ base64 secret, or an Ed25519 signature (v1a) checked with a
	// whpk_ base64 public key, over "id.timestamp.body". The key is
	// webhook-id.
	Standard Scheme = "standard"
	// Stripe is Stripe-Signature: t=TIMESTAMP,v1=HEX[,v1=HEX…], an
	// HMAC-SHA256 over "timestamp.body" with the endpoint's signing
	// secret (whsec_…, used as it is). The key is the event's id, the
	// body's "id" member.
	Stripe Scheme = "stripe"
	// GitHub is X-Hub-Signature-256: sha256=HEX, an HMAC-SHA256 of the
	// body with the webhook's secret. The key is X-GitHub-Delivery (a
	// redelivery from GitHub's UI keeps it).
	GitHub Scheme = "github"
	// Shopify is X-Shopify-Hmac-Sha256: an HMAC-SHA256 of the body in
	// base64, with the app's client secret. The key is X-Shopify-Event-Id,
	// or X-Shopify-Webhook-Id when that is absent.
	Shopify Scheme = "shopify"
)

// Schemes lists every Scheme, for error messages and configuration.
var Schemes = []Scheme{Standard, Stripe, GitHub, Shopify}

// DefaultTolerance is how far a signed timestamp may be from the clock,
// either way, when Config.Tolerance is zero.
const DefaultTolerance = 5 * time.Minute

// ProblemWebhookSignature is the problem type slug of the 401 answer to a
// delivery that failed verification.
const ProblemWebhookSignature = "webhook-signature"

// Reason says why a delivery failed verification; it is meant for metrics
// labels and logs.
type Reason string

// The reasons of a failed verification.
const (
	// ReasonMissingHeader: a header the scheme requires is absent.
	ReasonMissingHeader Reason = "missing_header"
	// ReasonMalformedHeader: a header is sent twice, or cannot be parsed
	// (a timestamp that is not a number, no signature in the scheme's
	// form).
	ReasonMalformedHeader Reason = "malformed_header"
	// ReasonStaleTimestamp: the signature is valid but its signed
	// timestamp is outside the tolerance (a replayed old delivery, or a
	// clock that is off).
	ReasonStaleTimestamp Reason = "stale_timestamp"
	// ReasonBadSignature: no signature matches any configured secret: a
	// changed body, a forgery, or a secret the sender no longer uses.
	ReasonBadSignature Reason = "bad_signature"
	// ReasonUnknownSecret: the delivery is signed only with a kind of key
	// that is not configured (Standard Webhooks v1a signatures but only
	// whsec_ secrets, or v1 but only whpk_ keys; a Stripe header without
	// v1), so it cannot be checked.
	ReasonUnknownSecret Reason = "unknown_secret"
)

// Reasons lists every Reason, so that metrics can start each at zero.
var Reasons = []Reason{ReasonMissingHeader, ReasonMalformedHeader, ReasonStaleTimestamp, ReasonBadSignature, ReasonUnknownSecret}

// Error is a failed verification.
type Error struct {
	Reason Reason
	// Detail says what failed, for the sender's operator; it never
	// contains a secret or an expected signature.
	Detail string
}

// Error returns the detail with the reason.
func (e *Error) Error() string { return "webhook: " + string(e.Reason) + ": " + e.Detail }

func fail(reason Reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Config configures a Verifier.
type Config struct {
	// Scheme is the sender's signature scheme. Required.
	Scheme Scheme
	// Secrets are tried in turn; several let a secret be rotated (add the
	// new one, then remove the old once the sender uses the new). At
	// least one is required. Standard Webhooks secrets are whsec_ (or
	// bare) base64 HMAC keys, or whpk_ base64 Ed25519 public keys; the
	// other schemes use the secret's text as it is.
	Secrets []string
	// Tolerance is how far a signed timestamp may be from Now, either
	// way (Standard Webhooks and Stripe sign one). Zero means
	// DefaultTolerance; negative is an error.
	Tolerance time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Verifier checks the deliveries of one sender. It is safe for concurrent
// use.
type Verifier struct {
	scheme    Scheme
	tolerance time.Duration
	now       func() time.Time
	keys      atomic.Pointer[keyring]
}

// keyring is the parsed secrets of a Verifier.
type keyring struct {
	hmac   [][]byte // HMAC keys
	public [][]byte // Ed25519 public keys (Standard Webhooks v1a)
}

// New validates cfg and returns a Verifier.
func New(cfg Config) (*Verifier, error) {
	switch cfg.Scheme {
	case Standard, Stripe, GitHub, Shopify:
	default:
		return nil, fmt.Errorf("webhook: scheme %q is not one of %s", cfg.Scheme, schemeList())
	}
	if cfg.Tolerance < 0 {
		return nil, fmt.Errorf("webhook: negative tolerance %s", cfg.Tolerance)
	}
	v := &Verifier{scheme: cfg.Scheme, tolerance: cfg.Tolerance, now: cfg.Now}
	if v.tolerance == 0 {
		v.tolerance = DefaultTolerance
	}
	if v.now == nil {
		v.now = time.Now
	}
	if err := v.SetSecrets(cfg.Secrets); err != nil {
		return nil, err
	}
	return v, nil
}

func schemeList() string {
	s := make([]string, len(Schemes))
	for i, sc := range Schemes {
		s[i] = string(sc)
	}
	return strings.Join(s, ", ")
}

// SetSecrets replaces the secrets (as Config.Secrets) while the Verifier
// serves: deliveries verified after it returns use the new ones. On error
// the old secrets stay.
func (v *Verifier) SetSecrets(secrets []string) error {
	if len(secrets) == 0 {
		return errors.New("webhook: no secret: give at least one")
	}
	kr := &keyring{}
	for i, s := range secrets {
		if s == "" {
			return fmt.Errorf("webhook: secret %d is empty", i+1)
		}
		if v.scheme != Standard {
			kr.hmac = append(kr.hmac, []byte(s))
			continue
		}
		key, public, err := parseStandardSecret(s)
		if err != nil {
			return fmt.Errorf("webhook: secret %d: %w", i+1, err)
		}
		if public {
			kr.public = append(kr.public, key)
		} else {
			kr.hmac = append(kr.hmac, key)
		}
	}
	v.keys.Store(kr)
	return nil
}

// Scheme returns the Verifier's scheme.
func (v *Verifier) Scheme() Scheme { return v.scheme }

// Verify checks a delivery's signature over its exact body. It returns nil
// or an *Error.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	kr := v.keys.Load()
	var err *Error
	switch v.scheme {
	case Standard:
		err = v.verifyStandard(kr, h, body)
	case Stripe:
		err = v.verifyStripe(kr, h, body)
	case GitHub:
		err = verifyGitHub(kr, h, body)
	case Shopify:
		err = verifyShopify(kr, h, body)
	}
	if err != nil {
		return err
	}
	return nil
}

// Key returns the retrysafe.KeyFunc that reads the event's id, the key of
// a delivery under this scheme (see the Scheme constants).
func (v *Verifier) Key() retrysafe.KeyFunc {
	switch v.scheme {
	case Standard:
		return retrysafe.KeyFromHeader("webhook-id")
	case Stripe:
		k, _ := retrysafe.KeyFromJSON("/id")
		return k
	case GitHub:
		return retrysafe.KeyFromHeader("X-GitHub-Delivery")
	default:
		return retrysafe.KeyFromHeader("X-Shopify-Event-Id", "X-Shopify-Webhook-Id")
	}
}

// checkTimestamp checks a signed Unix time against the tolerance.
func (v *Verifier) checkTimestamp(ts int64) *Error {
	now := v.now()
	t := time.Unix(ts, 0)
	if d := now.Sub(t); d > v.tolerance || d < -v.tolerance {
		return fail(ReasonStaleTimestamp, "the signed timestamp %s is more than %s from the receiver's clock (%s)",
			t.UTC().Format(time.RFC3339), v.tolerance, now.UTC().Format(time.RFC3339))
	}
	return nil
}

// one returns the single value of header name, or why there is none.
func one(h http.Header, name string) (string, *Error) {
	values := h.Values(name)
	switch {
	case len(values) == 0 || (len(values) == 1 && strings.TrimSpace(values[0]) == ""):
		return "", fail(ReasonMissingHeader, "the %s header is missing", name)
	case len(values) > 1:
		return "", fail(ReasonMalformedHeader, "the %s header is sent %d times; send it once", name, len(values))
	}
	return strings.TrimSpace(values[0]), nil
}

// anyEqual reports, in constant time for each candidate, whether mac is
// one of macs.
func anyEqual(mac []byte, macs [][]byte) bool {
	found := false
	for _, m := range macs {
		if hmac.Equal(mac, m) {
			found = true
		}
	}
	return found
}

// MiddlewareConfig configures [Verifier.Middleware].
type MiddlewareConfig struct {
	// MaxBody is the largest body accepted, in bytes, checked before
	// verifying; a larger one gets 413. Zero means
	// retrysafe.DefaultMaxBody.
	MaxBody int64
	// ProblemBase is the base URI of problem types; "" means
	// retrysafe.DefaultProblemBase.
	ProblemBase string
	// OnFailure, when set, is called for each delivery that failed
	// verification (to count it by reason, say) before the 401 is
	// written.
	OnFailure func(r *http.Request, err *Error)
}

// Middleware returns middleware that verifies every request it sees and
// passes on only verified ones, with their body intact. A failed one gets
// 401 problem+json type webhook-signature (its detail says what failed,
// never what was expected), a body over the limit 413 body-too-large, and
// a body that cannot be read 400 bad-request-body; next never runs for
// them.
func (v *Verifier) Middleware(cfg MiddlewareConfig) func(http.Handler) http.Handler {
	limit := cfg.MaxBody
	if limit <= 0 {
		limit = retrysafe.DefaultMaxBody
	}
	base := cfg.ProblemBase
	if base == "" {
		base = retrysafe.DefaultProblemBase
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := readLimited(r, limit)
			if errors.Is(err, errTooLarge) {
				retrysafe.WriteProblem(w, &retrysafe.Problem{Type: base + retrysafe.ProblemBodyTooLarge, Title: "Request body too large",
					Status: http.StatusRequestEntityTooLarge, Detail: fmt.Sprintf("The delivery's body exceeds the limit of %d bytes; it was not verified and nothing was processed.", limit)}, 0)
				return
			}
			if err != nil {
				w.Header().Set("Connection", "close")
				retrysafe.WriteProblem(w, &retrysafe.Problem{Type: base + retrysafe.ProblemBadRequestBody, Title: "Request body unreadable",
					Status: http.StatusBadRequest, Detail: "The delivery's body could not be read (" + err.Error() + "); nothing was processed."}, 0)
				return
			}
			if err := v.Verify(r.Header, body); err != nil {
				var we *Error
				if !errors.As(err, &we) {
					we = &Error{Reason: ReasonBadSignature, Detail: err.Error()}
				}
				if cfg.OnFailure != nil {
					cfg.OnFailure(r, we)
				}
				retrysafe.WriteProblem(w, &retrysafe.Problem{Type: base + ProblemWebhookSignature, Title: "Webhook signature not verified",
					Status: http.StatusUnauthorized, Detail: "The delivery was not verified (" + string(we.Reason) + "): " + we.Detail + ". Nothing was processed or stored."}, 0)
				return
			}
			r2 := r.Clone(r.Context())
			r2.Body = io.NopCloser(bytes.NewReader(body))
			r2.ContentLength = int64(len(body))
			r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
			next.ServeHTTP(w, r2)
		})
	}
}

var errTooLarge = errors.New("webhook: body too large")

// readLimited reads r's whole body, up to limit bytes.
func readLimited(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, errTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errTooLarge
	}
	return b, nil
}
