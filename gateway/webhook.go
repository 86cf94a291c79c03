package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/webhook"
)

// WebhookPolicy makes a route a webhook receiver (config file: webhook):
// each delivery's signature is verified before anything else, the key is
// the event's id (see package webhook), and the scope is the route, so two
// senders' ids never collide.
//
// Secrets come from SecretsFile (one per line; several lines are several
// secrets, tried in turn, for rotation; blank lines and lines starting
// with # are skipped) and from the environment variable SecretsEnv (read
// the same way, once at start). The file is re-read when its modification
// time or size changes, checked at most once a second as deliveries
// arrive: rotate by adding the new secret on a line of its own, switching
// the sender to it, then removing the old line. A file that cannot be read
// or holds no valid secret keeps the secrets in use, with a warning.
type WebhookPolicy struct {
	// Scheme is the sender's scheme: standard, stripe, github or shopify.
	Scheme webhook.Scheme
	// SecretsFile is the file of secrets; SecretsEnv the variable. At
	// least one must be set and give a secret.
	SecretsFile string
	SecretsEnv  string
	// Tolerance bounds the signed timestamp's distance from the clock;
	// zero means webhook.DefaultTolerance.
	Tolerance time.Duration
}

// webhookScope is the scope of a webhook route's records: the route.
func webhookScope(pattern string) string { return "webhook " + pattern }

// secretsCheckInterval is how often, at most, a webhook route's secrets
// file is looked at for a change.
const secretsCheckInterval = time.Second

// webhookRoute is the verifier of one webhook route and the watch on its
// secrets file.
type webhookRoute struct {
	g        *Gateway
	pattern  string
	policy   WebhookPolicy
	verifier *webhook.Verifier
	interval time.Duration

	mu      sync.Mutex
	checked time.Time // last look at the file
	mtime   time.Time // of the file the secrets were read from
	size    int64     // of that file
	env     []string  // the secrets of SecretsEnv
}

// newWebhookRoute loads the route's secrets and builds its verifier.
func (g *Gateway) newWebhookRoute(pattern string, p WebhookPolicy) (*webhookRoute, error) {
	if pattern == "" {
		return nil, errors.New("webhook: only a route can be a webhook receiver (its scope is the route)")
	}
	if p.SecretsFile == "" && p.SecretsEnv == "" {
		return nil, errors.New("webhook: set secrets_file or secrets_env (secrets never go in the YAML itself)")
	}
	wr := &webhookRoute{g: g, pattern: pattern, policy: p, interval: secretsCheckInterval}
	if p.SecretsEnv != "" {
		wr.env = parseSecrets(os.Getenv(p.SecretsEnv))
		if len(wr.env) == 0 && p.SecretsFile == "" {
			return nil, fmt.Errorf("webhook: the environment variable %s holds no secret", p.SecretsEnv)
		}
	}
	secrets, err := wr.readSecrets()
	if err != nil {
		return nil, err
	}
	wr.verifier, err = webhook.New(webhook.Config{Scheme: p.Scheme, Secrets: secrets, Tolerance: p.Tolerance, Now: g.cfg.Now})
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	wr.checked = time.Now()
	return wr, nil
}

// readSecrets returns the secrets of the file (noting its modification
// time and size) and of the environment.
func (wr *webhookRoute) readSecrets() ([]string, error) {
	secrets := append([]string(nil), wr.env...)
	if f := wr.policy.SecretsFile; f != "" {
		st, err := os.Stat(f)
		if err != nil {
			return nil, fmt.Errorf("webhook: secrets_file: %w", err)
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("webhook: secrets_file: %w", err)
		}
		fromFile := parseSecrets(string(data))
		if len(fromFile) == 0 && len(secrets) == 0 {
			return nil, fmt.Errorf("webhook: secrets_file %s holds no secret (one per line)", f)
		}
		wr.mtime, wr.size = st.ModTime(), st.Size()
		secrets = append(fromFile, secrets...)
	}
	return secrets, nil
}

// parseSecrets splits a secrets file: one secret per line, without the
// line's surrounding spaces; blank lines and # comments are skipped.
func parseSecrets(text string) []string {
	var out []string
	for line := range strings.Lines(text) {
		s := strings.TrimSpace(line)
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		out = append(out, s)
	}
	return out
}

// reload re-reads the secrets file when it changed since it was read,
// at most once per interval.
func (wr *webhookRoute) reload() {
	if wr.policy.SecretsFile == "" {
		return
	}
	wr.mu.Lock()
	defer wr.mu.Unlock()
	now := time.Now()
	if now.Sub(wr.checked) < wr.interval {
		return
	}
	wr.checked = now
	st, err := os.Stat(wr.policy.SecretsFile)
	if err != nil {
		wr.g.logger.Warn("webhook secrets file unreadable; keeping the secrets in use", "route", wr.pattern, "err", err)
		return
	}
	if st.ModTime().Equal(wr.mtime) && st.Size() == wr.size {
		return
	}
	secrets, err := wr.readSecrets()
	if err == nil {
		err = wr.verifier.SetSecrets(secrets)
	}
	if err != nil {
		wr.g.logger.Warn("webhook secrets not reloaded; keeping the secrets in use", "route", wr.pattern, "err", err)
		return
	}
	wr.g.logger.Info("webhook secrets reloaded", "route", wr.pattern, "secrets", len(secrets))
}

// wrap returns h behind the route's verification.
func (wr *webhookRoute) wrap(h http.Handler, maxBody int64) http.Handler {
	verify := wr.verifier.Middleware(webhook.MiddlewareConfig{
		MaxBody: maxBody, ProblemBase: wr.g.problemBase,
		OnFailure: func(r *http.Request, e *webhook.Error) {
			wr.g.webhookFailures.WithLabelValues(wr.pattern, string(e.Reason)).Inc()
			if info := infoFrom(r.Context()); info != nil {
				info.outcome = outcomeWebhookSignature
			}
		},
	})(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wr.reload()
		verify.ServeHTTP(w, r)
	})
}

// outcomeWebhookSignature is logged for a delivery that failed
// verification.
const outcomeWebhookSignature retrysafe.Outcome = "webhook_signature"

// newWebhookMetric registers retrysafe_webhook_verification_failures_total.
func newWebhookMetric(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricPrefix + "webhook_verification_failures_total",
		Help: "Webhook deliveries refused with 401 webhook-signature, by route and reason (missing_header, malformed_header, stale_timestamp, bad_signature, unknown_secret). Nothing ran for them.",
	}, []string{"route", "reason"})
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return c, nil
}

// webhookFor returns the webhook route of pattern, or nil when p has no
// webhook option, and turns cfg (the route's middleware configuration,
// defaults applied) into a webhook route's: the key from the verified
// delivery, required; the route as the scope; and, unless the route lists
// store_statuses, 5xx answers not stored (the sender retries them and the
// event runs again).
func (g *Gateway) webhookFor(pattern string, p *Policy, cfg *retrysafe.Config) (*webhookRoute, error) {
	if p.Webhook == nil {
		return nil, nil
	}
	wr, err := g.newWebhookRoute(pattern, *p.Webhook)
	if err != nil {
		return nil, err
	}
	scope := webhookScope(pattern)
	cfg.Key = wr.verifier.Key()
	cfg.RequireKey = true
	cfg.Scope = func(*http.Request) (string, error) { return scope, nil }
	cfg.ScopeSource = "the route"
	if p.StoreStatuses == nil {
		cfg.StoreStatus = func(status int) bool { return status < 500 }
	}
	for _, reason := range webhook.Reasons {
		g.webhookFailures.WithLabelValues(pattern, string(reason))
	}
	return wr, nil
}

// policy checks a route's webhook option.
func (fw *fileWebhook) policy() (*WebhookPolicy, error) {
	p := &WebhookPolicy{}
	if fw.Scheme == nil {
		return nil, fmt.Errorf("scheme: required (one of %s)", schemeNames())
	}
	switch s := webhook.Scheme(strings.TrimSpace(*fw.Scheme)); s {
	case webhook.Standard, webhook.Stripe, webhook.GitHub, webhook.Shopify:
		p.Scheme = s
	default:
		return nil, fmt.Errorf("scheme: %q is not one of %s", *fw.Scheme, schemeNames())
	}
	if fw.SecretsFile != nil {
		p.SecretsFile = strings.TrimSpace(*fw.SecretsFile)
	}
	if fw.SecretsEnv != nil {
		p.SecretsEnv = strings.TrimSpace(*fw.SecretsEnv)
	}
	if p.SecretsFile == "" && p.SecretsEnv == "" {
		return nil, errors.New("secrets_file or secrets_env: required (a file with one secret per line, or an environment variable; secrets never go in this file)")
	}
	var err error
	if p.Tolerance, err = parseDurationField("tolerance", fw.Tolerance, 0); err != nil {
		return nil, err
	}
	return p, nil
}

func schemeNames() string {
	s := make([]string, len(webhook.Schemes))
	for i, sc := range webhook.Schemes {
		s[i] = string(sc)
	}
	return strings.Join(s, ", ")
}

// webhook sets p.Webhook from the route's webhook option, if any.
func (fr *fileRoute) webhook(p *Policy) error {
	if fr.Webhook == nil {
		return nil
	}
	if p.Bypass {
		return errors.New("webhook: set on a route with protect: false, which would pass deliveries through unverified; remove one of them")
	}
	w, err := fr.Webhook.policy()
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	p.Webhook = w
	return nil
}

// fileWebhook is a route's webhook option in the config file.
type fileWebhook struct {
	Scheme      *string `yaml:"scheme"`
	SecretsFile *string `yaml:"secrets_file"`
	SecretsEnv  *string `yaml:"secrets_env"`
	Tolerance   *string `yaml:"tolerance"`
}
