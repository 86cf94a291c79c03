package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/canonicaljson"
	"go.yaml.in/yaml/v3"
)

// fileConfig is the YAML document of --config. Every field of a route is
// optional except match; an absent field takes the flag's default.
type fileConfig struct {
	Routes []fileRoute `yaml:"routes"`
}

type fileRoute struct {
	Webhook *fileWebhook `yaml:"webhook"` // webhook.go

	Match           *string   `yaml:"match"`
	Protect         *bool     `yaml:"protect"`
	Methods         []string  `yaml:"methods"`
	RequireKey      *bool     `yaml:"require_key"`
	TTL             *string   `yaml:"ttl"`
	Lease           *string   `yaml:"lease"`
	InFlight        *string   `yaml:"in_flight"`
	WaitTimeout     *string   `yaml:"wait_timeout"`
	MaxBody         *string   `yaml:"max_body"`
	MaxResponseBody *string   `yaml:"max_response_body"`
	IgnoreFields    []string  `yaml:"ignore_fields"`
	StoreStatuses   []string  `yaml:"store_statuses"`
	ScopeHeader     *nameList `yaml:"scope_header"`
	ScopeCookie     *string   `yaml:"scope_cookie"`
	AllowEmptyScope *bool     `yaml:"allow_empty_scope"`
	ErrorDialect    *string   `yaml:"error_dialect"`
	ScopeRate       *string   `yaml:"scope_rate"`
	ScopeBurst      *int      `yaml:"scope_burst"`
	ScopeMaxLive    *int      `yaml:"scope_max_live"`
	OnUnknown       *string   `yaml:"on_unknown"`
	ResolveURL      *string   `yaml:"resolve_url"`
	ResolveTimeout  *string   `yaml:"resolve_timeout"`
}

// nameList is a YAML list of names that also accepts a single string
// (scope_header: X-Api-Key, as before lists were accepted).
type nameList []string

func (l *nameList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var s string
		if err := n.Decode(&s); err != nil {
			return err
		}
		*l = nameList{s}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return err
	}
	*l = list
	return nil
}

// routeFields lists the YAML fields of a route, for error messages.
var routeFields = []string{
	"webhook",
	"match", "protect", "methods", "require_key", "ttl", "lease", "in_flight", "wait_timeout",
	"max_body", "max_response_body", "ignore_fields", "store_statuses", "scope_header",
	"scope_rate", "scope_burst", "scope_max_live",
	"scope_cookie", "allow_empty_scope", "error_dialect",
	"on_unknown", "resolve_url", "resolve_timeout",
}

// LoadConfigFile reads a YAML route file (see [ParseConfig]).
func LoadConfigFile(path string, defaults Policy) ([]Route, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	routes, err := ParseConfig(data, defaults)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return routes, nil
}

// ParseConfig parses a YAML route file. Each route starts from defaults
// (the flags) and overrides the fields it sets:
//
//	routes:
//	  - match: "POST /payments"          # Go ServeMux pattern (required)
//	    require_key: true
//	    ttl: 48h
//	    lease: 1m
//	    in_flight: wait                  # conflict | wait
//	    wait_timeout: 15s
//	    max_body: 64KiB                  # bytes; KiB/MiB/GiB suffixes allowed
//	    max_response_body: 1MiB
//	    ignore_fields: ["/meta/requestedAt"]
//	    store_statuses: ["2xx", "4xx", 500]
//	    scope_header: [Authorization, Stripe-Account]   # or one name
//	    scope_cookie: session
//	    allow_empty_scope: false
//	    error_dialect: stripe             # problem | stripe
//	    scope_rate: 10/s                 # new keys per scope: 10/s, 600/m, 1000/h
//	    scope_burst: 20
//	    scope_max_live: 1000             # new keys per scope within the TTL, per instance
//	    on_unknown: block                # takeover | block: a retry of an unknown outcome
//	    resolve_url: http://svc:3000/idempotency/resolve   # asks the upstream instead
//	    resolve_timeout: 5s
//	  - match: "POST /webhooks/"
//	    protect: false                   # pass through unprotected
//
// A route's webhook option (scheme, secrets_file, secrets_env, tolerance)
// makes it a webhook receiver; see [WebhookPolicy] and docs/webhooks.md.
//
// Decoding is strict: an unknown field, a value of the wrong type or an
// invalid value is an error that names the route and the field. When a
// route's pattern names a method and methods is not set, that method is the
// one protected.
func ParseConfig(data []byte, defaults Policy) ([]Route, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	infos := routeInfos(&doc)

	var fc fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
		return nil, explainYAMLError(err, infos, &fc)
	}
	mux := http.NewServeMux()
	routes := make([]Route, 0, len(fc.Routes))
	for i, fr := range fc.Routes {
		r, err := fr.route(defaults)
		if err == nil {
			err = registerPattern(mux, r.Pattern, http.NotFoundHandler())
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", routeName(i, infos, fr.Match), err)
		}
		routes = append(routes, r)
	}
	return routes, nil
}

func (fr *fileRoute) route(p Policy) (Route, error) {
	if fr.Match == nil || strings.TrimSpace(*fr.Match) == "" {
		return Route{}, errors.New("match: required (a ServeMux pattern such as \"POST /payments\")")
	}
	pattern := strings.TrimSpace(*fr.Match)
	p.Methods = append([]string(nil), p.Methods...)
	p.IgnoreFields = append([]string(nil), p.IgnoreFields...)
	if fr.Protect != nil {
		p.Bypass = !*fr.Protect
	}
	if err := fr.webhook(&p); err != nil { // webhook.go
		return Route{}, err
	}
	switch {
	case fr.Methods != nil:
		if len(fr.Methods) == 0 {
			return Route{}, errors.New("methods: empty list (omit the field for the defaults, or set protect: false)")
		}
		p.Methods = p.Methods[:0]
		for _, m := range fr.Methods {
			if !validMethod(m) {
				return Route{}, fmt.Errorf("methods: %q is not an HTTP method", m)
			}
			p.Methods = append(p.Methods, strings.ToUpper(m))
		}
	case patternMethod(pattern) != "":
		p.Methods = []string{patternMethod(pattern)}
	}
	if fr.RequireKey != nil {
		p.RequireKey = *fr.RequireKey
	}
	var err error
	if p.TTL, err = parseDurationField("ttl", fr.TTL, p.TTL); err != nil {
		return Route{}, err
	}
	if p.Lease, err = parseDurationField("lease", fr.Lease, p.Lease); err != nil {
		return Route{}, err
	}
	if p.WaitTimeout, err = parseDurationField("wait_timeout", fr.WaitTimeout, p.WaitTimeout); err != nil {
		return Route{}, err
	}
	if fr.InFlight != nil {
		switch m := retrysafe.InFlightMode(strings.TrimSpace(*fr.InFlight)); m {
		case retrysafe.InFlightConflict, retrysafe.InFlightWait:
			p.InFlight = m
		default:
			return Route{}, fmt.Errorf("in_flight: %q is not %q or %q", *fr.InFlight, retrysafe.InFlightConflict, retrysafe.InFlightWait)
		}
	}
	if p.MaxBody, err = parseSizeField("max_body", fr.MaxBody, p.MaxBody); err != nil {
		return Route{}, err
	}
	if p.MaxResponseBody, err = parseSizeField("max_response_body", fr.MaxResponseBody, p.MaxResponseBody); err != nil {
		return Route{}, err
	}
	if fr.IgnoreFields != nil {
		p.IgnoreFields = append([]string(nil), fr.IgnoreFields...)
		for j, ptr := range p.IgnoreFields {
			if err := canonicaljson.ValidatePointer(ptr); err != nil {
				return Route{}, fmt.Errorf("ignore_fields[%d]: %q is not a JSON Pointer: %w", j, ptr, err)
			}
		}
	}
	if fr.StoreStatuses != nil {
		if len(fr.StoreStatuses) == 0 {
			return Route{}, errors.New("store_statuses: empty list (omit the field to store every status)")
		}
		set, err := ParseStatusSet(fr.StoreStatuses)
		if err != nil {
			return Route{}, fmt.Errorf("store_statuses: %w", err)
		}
		p.StoreStatuses = set
	}
	if fr.ScopeHeader != nil {
		if p.ScopeHeaders, err = ParseScopeHeaders(*fr.ScopeHeader); err != nil {
			return Route{}, fmt.Errorf("scope_header: %w", err)
		}
	}
	if fr.ScopeCookie != nil {
		if p.ScopeCookie, err = ParseScopeCookie(*fr.ScopeCookie); err != nil {
			return Route{}, fmt.Errorf("scope_cookie: %w", err)
		}
	}
	if (fr.ScopeHeader != nil || fr.ScopeCookie != nil) && len(p.ScopeHeaders) == 0 && p.ScopeCookie == "" {
		return Route{}, errors.New("scope_header: empty list and no scope_cookie: name what identifies a caller (allow_empty_scope: true lets requests without it share one key space)")
	}
	if fr.AllowEmptyScope != nil {
		p.AllowEmptyScope = *fr.AllowEmptyScope
	}
	if fr.ErrorDialect != nil {
		if p.ErrorDialect, err = ParseErrorDialect(*fr.ErrorDialect); err != nil {
			return Route{}, fmt.Errorf("error_dialect: %w", err)
		}
	}
	if err := fr.scopeLimits(&p.ScopeLimits); err != nil {
		return Route{}, err
	}
	if fr.OnUnknown != nil {
		if p.OnUnknown, err = ParseOnUnknown(*fr.OnUnknown); err != nil {
			return Route{}, fmt.Errorf("on_unknown: %w", err)
		}
	}
	if fr.ResolveURL != nil {
		if p.ResolveURL, err = ParseResolveURL(*fr.ResolveURL); err != nil {
			return Route{}, fmt.Errorf("resolve_url: %w", err)
		}
	}
	if p.ResolveTimeout, err = parseDurationField("resolve_timeout", fr.ResolveTimeout, p.ResolveTimeout); err != nil {
		return Route{}, err
	}
	return Route{Pattern: pattern, Policy: p}, nil
}

// scopeLimits overrides l with the route's scope_rate, scope_burst and
// scope_max_live; "off" (or 0) turns a limit off.
func (fr *fileRoute) scopeLimits(l *ScopeLimits) error {
	if fr.ScopeRate != nil {
		switch v := strings.TrimSpace(*fr.ScopeRate); v {
		case "off", "0":
			l.Rate, l.Burst = 0, 0
		default:
			rate, err := ParseScopeRate(v)
			if err != nil {
				return fmt.Errorf("scope_rate: %w", err)
			}
			l.Rate = rate
		}
	}
	if fr.ScopeBurst != nil {
		if *fr.ScopeBurst < 0 {
			return fmt.Errorf("scope_burst: %d is negative (0 means the rate rounded up)", *fr.ScopeBurst)
		}
		l.Burst = *fr.ScopeBurst
	}
	if fr.ScopeMaxLive != nil {
		if *fr.ScopeMaxLive < 0 {
			return fmt.Errorf("scope_max_live: %d is negative (0 means no bound)", *fr.ScopeMaxLive)
		}
		l.MaxLive = *fr.ScopeMaxLive
	}
	if l.Burst > 0 && l.Rate == 0 {
		return errors.New("scope_burst: set without a scope_rate")
	}
	return nil
}

func parseDurationField(name string, v *string, def time.Duration) (time.Duration, error) {
	if v == nil {
		return def, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(*v))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: %q is not a positive duration (write it with a unit, like 30s, 5m or 24h)", name, *v)
	}
	return d, nil
}

func parseSizeField(name string, v *string, def int64) (int64, error) {
	if v == nil {
		return def, nil
	}
	n, err := ParseSize(*v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}

var sizeRE = regexp.MustCompile(`^([0-9]+)\s*(|B|KB|KiB|MB|MiB|GB|GiB)$`)

// ParseSize parses a positive byte count: "1048576", "64KiB", "1MiB",
// "1MB" (KB/MB/GB are powers of 1000, KiB/MiB/GiB powers of 1024).
func ParseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("%q is not a size in bytes (like 1048576, 64KiB or 1MiB)", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	mult := map[string]int64{"": 1, "B": 1, "KB": 1e3, "KiB": 1 << 10, "MB": 1e6, "MiB": 1 << 20, "GB": 1e9, "GiB": 1 << 30}[m[2]]
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a positive size in bytes", s)
	}
	return n * mult, nil
}

var registeredAtRE = regexp.MustCompile(` \(registered at [^)]*\)`)

// registerPattern registers h for pattern on mux, turning ServeMux's panics
// (invalid pattern, conflict with an earlier pattern) into errors.
func registerPattern(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			msg := registeredAtRE.ReplaceAllString(fmt.Sprint(v), "")
			err = fmt.Errorf("match: %q: %s", pattern, strings.ReplaceAll(msg, ":\n\t", ": "))
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// patternMethod returns the method of a ServeMux pattern, or "".
func patternMethod(pattern string) string {
	method, rest, found := strings.Cut(pattern, " ")
	if !found || strings.HasPrefix(method, "/") || strings.TrimSpace(rest) == "" {
		return ""
	}
	return method
}

// ParseScopeHeaders checks a list of scope header names (--scope-header,
// scope_header) and returns them trimmed, in order.
func ParseScopeHeaders(names []string) ([]string, error) {
	out := make([]string, 0, len(names))
	for _, n := range names {
		h := strings.TrimSpace(n)
		if !validHeaderName(h) {
			return nil, fmt.Errorf("%q is not a header name", n)
		}
		out = append(out, h)
	}
	return out, nil
}

// ParseScopeCookie checks a scope cookie name (--scope-cookie,
// scope_cookie); "" means none.
func ParseScopeCookie(name string) (string, error) {
	c := strings.TrimSpace(name)
	if c != "" && !validToken(c) {
		return "", fmt.Errorf("%q is not a cookie name", name)
	}
	return c, nil
}

// ParseErrorDialect parses an error dialect name (--error-dialect,
// error_dialect): problem or stripe.
func ParseErrorDialect(s string) (retrysafe.ErrorDialect, error) {
	switch d := retrysafe.ErrorDialect(strings.TrimSpace(s)); d {
	case retrysafe.DialectProblem, retrysafe.DialectStripe:
		return d, nil
	}
	return "", fmt.Errorf("%q is not %q or %q", s, retrysafe.DialectProblem, retrysafe.DialectStripe)
}

func validMethod(m string) bool {
	return m != "" && validToken(m)
}

func validHeaderName(h string) bool { return h != "" && validToken(h) }

func validToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// routeInfo locates a route in the YAML source: the line it starts on and,
// for each line holding a value, the field it belongs to.
type routeInfo struct {
	line   int
	fields map[int]string
}

// routeInfos returns the location of each route of the document.
func routeInfos(doc *yaml.Node) []routeInfo {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil
	}
	var infos []routeInfo
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "routes" || top.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		for _, n := range top.Content[i+1].Content {
			ri := routeInfo{line: n.Line, fields: map[int]string{}}
			if n.Kind == yaml.MappingNode {
				for j := 0; j+1 < len(n.Content); j += 2 {
					key, val := n.Content[j], n.Content[j+1]
					ri.fields[key.Line] = key.Value
					markLines(val, key.Value, ri.fields)
				}
			}
			infos = append(infos, ri)
		}
	}
	return infos
}

func markLines(n *yaml.Node, field string, m map[int]string) {
	if _, ok := m[n.Line]; !ok {
		m[n.Line] = field
	}
	for _, c := range n.Content {
		markLines(c, field, m)
	}
}

// routeName names route i for an error message: its line, index and pattern.
func routeName(i int, infos []routeInfo, match *string) string {
	s := fmt.Sprintf("routes[%d]", i)
	if match != nil {
		s += fmt.Sprintf(" (%q)", *match)
	}
	if i < len(infos) {
		s = fmt.Sprintf("line %d: %s", infos[i].line, s)
	}
	return s
}

var yamlLineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

// explainYAMLError rewrites yaml's type errors so that each names the route
// it is in and, for an unknown field, lists the known ones.
func explainYAMLError(err error, infos []routeInfo, fc *fileConfig) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("invalid config: %w", err)
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, m := range te.Errors {
		sm := yamlLineRE.FindStringSubmatch(m)
		if sm == nil {
			msgs = append(msgs, m)
			continue
		}
		line, _ := strconv.Atoi(sm[1])
		what := sm[2]
		route := -1
		for i, ri := range infos {
			if ri.line <= line {
				route = i
			}
		}
		switch {
		case strings.Contains(what, "in type gateway.fileRoute"):
			what = strings.Replace(what, " not found in type gateway.fileRoute", "", 1)
			what = "unknown " + what + " (known fields: " + strings.Join(sortedCopy(routeFields), ", ") + ")"
		case strings.Contains(what, "in type gateway.fileWebhook"):
			what = "webhook: unknown " + strings.Replace(what, " not found in type gateway.fileWebhook", "", 1) + " (known fields: scheme, secrets_file, secrets_env, tolerance)"
		case strings.Contains(what, "in type gateway.fileConfig"):
			what = strings.Replace(what, " not found in type gateway.fileConfig", "", 1)
			what = "unknown top-level " + what + " (known fields: routes)"
			route = -1
		case route >= 0:
			if f, ok := infos[route].fields[line]; ok {
				what = f + ": " + what
			}
		}
		if route >= 0 {
			var match *string
			if route < len(fc.Routes) {
				match = fc.Routes[route].Match
			}
			name := fmt.Sprintf("routes[%d]", route)
			if match != nil {
				name += fmt.Sprintf(" (%q)", *match)
			}
			msgs = append(msgs, fmt.Sprintf("line %d: %s: %s", line, name, what))
		} else {
			msgs = append(msgs, fmt.Sprintf("line %d: %s", line, what))
		}
	}
	return errors.New(strings.Join(msgs, "; "))
}

func sortedCopy(s []string) []string {
	c := append([]string(nil), s...)
	sort.Strings(c)
	return c
}
