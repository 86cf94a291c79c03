package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/httpmethod"
	"github.com/retrysafe/retrysafe/internal/scopehash"
)

// Policy is the idempotency policy of one route (or the defaults). The zero
// Policy protects POST and PATCH with the defaults of [retrysafe.Config]:
// zero fields mean those defaults, and no ScopeHeaders and no ScopeCookie
// mean the Authorization header.
type Policy struct {
	// Bypass passes the route through unprotected (config file:
	// protect: false).
	Bypass bool
	// Webhook, when set, makes the route a webhook receiver (config file:
	// webhook); see [WebhookPolicy].
	Webhook *WebhookPolicy
	// Methods are the protected methods; nil means POST and PATCH.
	Methods []string
	// RequireKey answers 400 to a protected request without a key; when
	// false such a request passes through unprotected.
	RequireKey bool
	// TTL is how long a completed response is replayed.
	TTL time.Duration
	// Lease is how long a claim holds without a heartbeat; an abandoned
	// request (outcome unknown) keeps its key this long.
	Lease time.Duration
	// InFlight is what a duplicate gets while the original runs.
	InFlight retrysafe.InFlightMode
	// WaitTimeout bounds waiting in wait mode.
	WaitTimeout time.Duration
	// MaxBody is the largest request body accepted, in bytes.
	MaxBody int64
	// MaxResponseBody is the largest response body stored, in bytes.
	MaxResponseBody int64
	// IgnoreFields are JSON Pointers left out of the fingerprint.
	IgnoreFields []string
	// StoreStatuses are the response statuses stored and replayed; nil
	// stores every status. For other statuses the key is released.
	StoreStatuses StatusSet
	// ScopeHeaders name the headers whose values (hashed together, in
	// order) identify the caller; see [retrysafe.ScopeFromHeaders]. With
	// ScopeCookie also empty, nil means Authorization.
	ScopeHeaders []string
	// ScopeCookie names a cookie whose value identifies the caller too
	// (config file: scope_cookie), as [retrysafe.ScopeFromCookie] does. A
	// caller who sends only the headers (or only the cookie) gets the scope
	// that source alone gives; one who sends both gets a scope of the two
	// together. "" means none.
	ScopeCookie string
	// AllowEmptyScope lets keyed requests that carry none of the scope
	// headers and no scope cookie run, all in one shared key space. By
	// default they get 400 empty-scope and nothing runs.
	AllowEmptyScope bool
	// ErrorDialect is the shape of the gateway's own error answers:
	// retrysafe.DialectProblem ("" too) or retrysafe.DialectStripe.
	ErrorDialect retrysafe.ErrorDialect
	// ScopeLimits limit the new keys of each scope on this route; the
	// zero value limits nothing.
	ScopeLimits ScopeLimits
	// OnUnknown is what a retry gets when it finds an attempt whose
	// outcome is unknown (its owner abandoned it, or its lease ran out):
	// "" and retrysafe.OnUnknownTakeover run it again once the lease is
	// over; retrysafe.OnUnknownBlock answers 409 outcome-unknown until
	// someone resolves it. With ResolveURL set, the resolver decides
	// instead.
	OnUnknown retrysafe.UnknownPolicy
	// ResolveURL, when set, is asked whether such an attempt happened,
	// before any takeover and from the completer ([Gateway.RunSweeper]),
	// with the protocol of docs/gateway.md ("Unknown outcomes"): done
	// (its answer is stored and replayed), not_done (the takeover runs),
	// anything else (the record stays blocked).
	ResolveURL *url.URL
	// ResolveTimeout bounds one call to ResolveURL; zero means
	// [DefaultResolveTimeout].
	ResolveTimeout time.Duration
}

// scope returns the Scope function of p and the phrase naming what a
// caller sends to be identified; nil means the middleware's default.
func (p *Policy) scope() (func(*http.Request) (string, error), string) {
	if len(p.ScopeHeaders) == 0 && p.ScopeCookie == "" {
		return nil, ""
	}
	var parts []string
	for _, h := range p.ScopeHeaders {
		parts = append(parts, "the "+h+" header")
	}
	if p.ScopeCookie != "" {
		parts = append(parts, "the "+p.ScopeCookie+" cookie")
	}
	source := strings.Join(parts, " or ")
	return scopeFromHeadersAndCookie(p.ScopeHeaders, p.ScopeCookie), source
}

// scopeFromHeadersAndCookie returns a Scope function built from the named
// headers (as [retrysafe.ScopeFromHeaders]) and, when cookie is not "", the
// named cookie (as [retrysafe.ScopeFromCookie]). A caller who sends only
// the headers (or only the cookie) gets the scope that source alone gives;
// one who sends both gets a scope of the two together. The scope is empty
// when neither is there.
func scopeFromHeadersAndCookie(headers []string, cookie string) func(*http.Request) (string, error) {
	var fromHeaders func(*http.Request) (string, error)
	if len(headers) > 0 {
		fromHeaders = retrysafe.ScopeFromHeaders(headers...)
	}
	if cookie == "" {
		if fromHeaders == nil {
			return func(*http.Request) (string, error) { return "", nil }
		}
		return fromHeaders
	}
	fromCookie := retrysafe.ScopeFromCookie(cookie)
	if fromHeaders == nil {
		return fromCookie
	}
	return func(r *http.Request) (string, error) {
		hs, _ := fromHeaders(r) // header and cookie scopes never fail
		cs, _ := fromCookie(r)
		switch {
		case cs == "":
			return hs, nil
		case hs == "":
			return cs, nil
		}
		// Both are hex digests of fixed length; the prefix keeps the
		// pair apart from any single source's input.
		return scopehash.Sum("both\x00" + hs + "\x00" + cs), nil
	}
}

// DefaultPolicy returns the policy of the fixed CLI defaults: POST and PATCH
// protected, key optional, TTL 24h, lease 30s, conflict mode, wait timeout
// 10s, 1 MiB request bodies, every status stored, scope from Authorization
// (a request without it gets 400 empty-scope), problem+json errors.
func DefaultPolicy() Policy {
	return Policy{
		Methods:         []string{http.MethodPost, http.MethodPatch},
		TTL:             retrysafe.DefaultTTL,
		Lease:           retrysafe.DefaultLease,
		InFlight:        retrysafe.InFlightConflict,
		WaitTimeout:     retrysafe.DefaultWaitTimeout,
		MaxBody:         retrysafe.DefaultMaxBody,
		MaxResponseBody: retrysafe.DefaultMaxResponseBody,
		ScopeHeaders:    []string{"Authorization"},
	}
}

// middlewareConfig is the middleware's configuration for p under the
// gateway's settings: the one place a Policy becomes a [retrysafe.Config].
// Zero fields stay zero, so the middleware's defaults apply; read the
// effective values from [retrysafe.Config.WithDefaults].
func (p *Policy) middlewareConfig(g *Gateway) retrysafe.Config {
	scope, source := p.scope() // nil: the middleware's default, Authorization
	var storeStatus func(int) bool
	if p.StoreStatuses != nil {
		storeStatus = p.StoreStatuses.Contains
	}
	return retrysafe.Config{
		Store:           g.cfg.Store,
		Methods:         p.Methods,
		RequireKey:      p.RequireKey,
		TTL:             p.TTL,
		Lease:           p.Lease,
		InFlight:        p.InFlight,
		WaitTimeout:     p.WaitTimeout,
		MaxBody:         p.MaxBody,
		MaxResponseBody: p.MaxResponseBody,
		StoreTimeout:    g.cfg.StoreTimeout,
		FailOpen:        g.cfg.FailOpen,
		StoreStatus:     storeStatus,
		Scope:           scope,
		ScopeSource:     source,
		RequireScope:    !p.AllowEmptyScope,
		ErrorDialect:    p.ErrorDialect,
		IgnoreFields:    p.IgnoreFields,
		OnUnknown:       p.OnUnknown,
		ResolveTimeout:  p.ResolveTimeout,
		Now:             g.cfg.Now,
		Logger:          g.logger,
		Observer:        g.observer(),
		ProblemBase:     g.problemBase,
	}
}

// protects reports whether method is protected under p, by the same rule as
// the middleware's: [httpmethod.Protected].
func (p *Policy) protects(method string) bool {
	return !p.Bypass && httpmethod.Protected(p.Methods, method)
}

// muxPattern returns pattern with its method (if any) in the form
// [httpmethod.Canonical] gives; requests are matched with their method
// in that form too, so "patch /x" and "PATCH /x" route alike.
func muxPattern(pattern string) string {
	if m := patternMethod(pattern); m != "" {
		return httpmethod.Canonical(m) + pattern[len(m):]
	}
	return pattern
}

// StatusRange is an inclusive range of HTTP status codes.
type StatusRange struct{ Lo, Hi int }

// StatusSet is a set of HTTP status codes, written as codes ("201") and
// classes ("2xx"). The zero (nil) set has no members; [Policy] reads a nil
// StoreStatuses as "every status".
type StatusSet []StatusRange

// ParseStatusSet parses codes such as "200", "409" and classes such as
// "2xx", "5xx". It returns an error naming the first invalid entry.
func ParseStatusSet(items []string) (StatusSet, error) {
	set := make(StatusSet, 0, len(items))
	for _, it := range items {
		s := strings.ToLower(strings.TrimSpace(it))
		if len(s) == 3 && s[1:] == "xx" && s[0] >= '1' && s[0] <= '5' {
			lo := int(s[0]-'0') * 100
			set = append(set, StatusRange{lo, lo + 99})
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 || n > 599 {
			return nil, fmt.Errorf("%q is not a status code (100-599) or class (1xx-5xx)", it)
		}
		set = append(set, StatusRange{n, n})
	}
	return set, nil
}

// Contains reports whether code is in the set.
func (s StatusSet) Contains(code int) bool {
	for _, r := range s {
		if code >= r.Lo && code <= r.Hi {
			return true
		}
	}
	return false
}

// String formats the set as a comma-separated list.
func (s StatusSet) String() string {
	parts := make([]string, len(s))
	for i, r := range s {
		switch {
		case r.Lo == r.Hi:
			parts[i] = strconv.Itoa(r.Lo)
		case r.Lo%100 == 0 && r.Hi == r.Lo+99:
			parts[i] = strconv.Itoa(r.Lo/100) + "xx"
		default:
			parts[i] = fmt.Sprintf("%d-%d", r.Lo, r.Hi)
		}
	}
	return strings.Join(parts, ",")
}

// Route is a per-route policy: requests that match Pattern (a Go ServeMux
// pattern such as "POST /payments" or "POST /orders/{id}/refunds") use
// Policy instead of the gateway's defaults.
type Route struct {
	Pattern string
	Policy  Policy
}
