package gateway

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/webhook"
)

//go:embed ui
var uiFiles embed.FS

// UIPath is where the operator page is served.
const UIPath = "/ui/"

// Cookie names of the operator page.
const (
	uiTokenCookie = "retrysafe_admin"
	uiCSRFCookie  = "retrysafe_csrf"
	uiFlashCookie = "retrysafe_flash"
)

// SessionLifetime is how long a login lasts. A restart of the process ends
// every session sooner: the session cookie is keyed by a per-process
// secret.
const SessionLifetime = 12 * time.Hour

// MinAdminTokenLength is the shortest token [ParseAdminTokens] accepts.
const MinAdminTokenLength = 16

// AdminToken is one credential of the operator page. Name says who holds
// it; the page writes it to the log with every action.
type AdminToken struct {
	Name   string
	Secret string
}

// ParseAdminTokens reads an admin token file (`--admin-token-file`): one
// token per line, optionally preceded by the holder's name and a space
// ("alice 6b1f…"); blank lines and lines starting with # are ignored. A
// token must be at least [MinAdminTokenLength] characters. An unnamed token
// is named "token N" (its line number).
func ParseAdminTokens(r io.Reader) ([]AdminToken, error) {
	var out []AdminToken
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		tok := AdminToken{Name: fmt.Sprintf("token %d", n), Secret: line}
		if name, secret, ok := strings.Cut(line, " "); ok {
			tok = AdminToken{Name: name, Secret: strings.TrimSpace(secret)}
		}
		if len(tok.Secret) < MinAdminTokenLength || strings.ContainsAny(tok.Secret, " \t") {
			return nil, fmt.Errorf("line %d: want [NAME ]TOKEN with a token of at least %d characters and no spaces", n, MinAdminTokenLength)
		}
		out = append(out, tok)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no token in the file")
	}
	return out, nil
}

// UIConfig configures the operator page ([NewUI]).
type UIConfig struct {
	// Store is read and changed through admin.Admin, which it must
	// implement. Wrap it with store/sealed and a key ring to show
	// encrypted responses decrypted.
	Store retrysafe.Store
	// Tokens, when not empty, are the credentials every page and action
	// requires (an Authorization: Bearer header, or the login form, which
	// sets a session cookie derived from the token, never the token
	// itself). Empty means no authentication: only for a page that
	// nobody else can reach (loopback).
	Tokens []AdminToken
	// Hosts are the names the page answers to besides localhost,
	// *.localhost, loopback addresses and the address a connection
	// arrived on (`--admin-host`). A request with any other Host gets 421
	// and nothing is done: that is what defeats DNS rebinding.
	Hosts []string
	// Title names what the page shows (a gateway, a store).
	Title string
	// Logger receives one line per action, naming who did it. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Routes are the route patterns the records filter offers (records
	// store the pattern of the route that claimed them; see
	// retrysafe.Config.RouteName). Any route can be typed in.
	Routes []string
	// ResolveTTL is how long an answer stored by the Resolve action is
	// replayed; zero means retrysafe.DefaultTTL. The gateway uses each
	// route's TTL.
	ResolveTTL time.Duration

	rates    *rateRing                 // the gateway's rates; nil on a standalone page
	ttls     map[string]time.Duration  // the gateway's TTL by route pattern
	webhooks map[string]webhook.Scheme // the gateway's webhook routes, by pattern
}

// UI is the operator page: an http.Handler for the paths under [UIPath].
//
//	GET  /ui/                overview: unknown outcomes first, live rates by
//	                         outcome, counts by state, the oldest in flight
//	GET  /ui/records         records with filters, a page at a time
//	POST /ui/records         the filter form: turns an identity into its
//	                         scope and redirects, so no URL holds it
//	GET  /ui/record          one record (?scope=&key=; &body=1 shows the body)
//	GET  /ui/delete          the confirmation of a delete
//	POST /ui/delete          deletes a record (CSRF token required)
//	POST /ui/resolve         resolves an unknown outcome: the record page's
//	                         form, then its confirmation (CSRF token
//	                         required; fenced by the owner token read)
//	GET  /ui/login, POST /ui/login, POST /ui/logout
//
// Pages are rendered on the server (html/template); a small script
// refreshes the live parts. Every state-changing request needs the CSRF
// token of its form and is refused cross-origin; every request whose Host
// is not a loopback name or address, or one of UIConfig.Hosts, gets 421.
type UI struct {
	cfg    UIConfig
	admin  admin.Admin
	logger *slog.Logger
	now    func() time.Time
	secret []byte // keys the CSRF tokens, session cookies and flash notices
	pages  map[string]*template.Template
	static http.Handler
	mux    *http.ServeMux

	guard     tokenGuard  // wrong tokens per address
	wrongLog  warnLimiter // one warning per interval for wrong tokens
	hostLog   warnLimiter // and for foreign Hosts
	authedLog warnLimiter // and for ended sessions
}

// NewUI returns the operator page for cfg.
func NewUI(cfg UIConfig) (*UI, error) {
	adm, ok := retrysafe.As[admin.Admin](cfg.Store)
	if !ok {
		return nil, errors.New("gateway: the operator page needs a store that implements admin.Admin")
	}
	for _, t := range cfg.Tokens {
		if len(t.Secret) < MinAdminTokenLength {
			return nil, fmt.Errorf("gateway: admin token %q is shorter than %d characters", t.Name, MinAdminTokenLength)
		}
	}
	u := &UI{cfg: cfg, admin: adm, logger: cfg.Logger, now: cfg.Now, secret: make([]byte, 32),
		wrongLog: warnLimiter{every: WrongTokenWindow}, hostLog: warnLimiter{every: time.Minute}, authedLog: warnLimiter{every: time.Minute}}
	if u.logger == nil {
		u.logger = slog.Default()
	}
	if u.now == nil {
		u.now = time.Now
	}
	_, _ = rand.Read(u.secret)
	var err error
	if u.pages, err = parseUITemplates(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(uiFiles, "ui/static")
	if err != nil {
		return nil, err
	}
	u.static = http.StripPrefix(UIPath+"static/", http.FileServerFS(static))
	u.routes()
	return u, nil
}

func (u *UI) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /ui/static/", u.serveStatic)
	m.HandleFunc("GET /ui/login", u.loginPage)
	m.HandleFunc("POST /ui/login", u.login)
	m.Handle("POST /ui/logout", u.authed(u.logout))
	m.Handle("GET /ui/{$}", u.authed(u.overview))
	m.Handle("GET /ui/overview.part", u.authed(u.overviewPart))
	m.Handle("GET /ui/records", u.authed(u.records))
	m.Handle("POST /ui/records", u.authed(u.recordsFilter))
	m.Handle("GET /ui/records.part", u.authed(u.recordsPart))
	m.Handle("GET /ui/record", u.authed(u.record))
	m.Handle("GET /ui/delete", u.authed(u.deleteConfirm))
	m.Handle("POST /ui/delete", u.authed(u.delete))
	m.Handle("POST /ui/resolve", u.authed(u.resolve))
	u.mux = m
}

// crossOrigin refuses state-changing requests that a browser marks as
// cross-origin (Sec-Fetch-Site, Origin), before the CSRF token is checked.
var crossOrigin = http.NewCrossOriginProtection()

// ServeHTTP serves the operator page.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	if !hostAllowed(r, u.cfg.Hosts) {
		u.hostLog.warn(r.Context(), u.logger, u.now(), "operator page: request refused: its Host is not a name of this page (DNS rebinding?)",
			"host", r.Host, "remote", r.RemoteAddr, "path", r.URL.Path)
		adminProblem(w, http.StatusMisdirectedRequest, ProblemMisdirectedHost, "Misdirected Request",
			fmt.Sprintf("The operator page answers only requests addressed to localhost, a loopback address, the address it listens on, or a name given with --admin-host; Host %q is none of these, so nothing was done. Open the page by one of those, or add the name with --admin-host.", r.Host), 0)
		return
	}
	if err := crossOrigin.Check(r); err != nil {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return
	}
	u.mux.ServeHTTP(w, r)
}

func (u *UI) serveStatic(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	u.static.ServeHTTP(w, r)
}

// actor is who makes a request, for the log: the name of the token
// presented, or "anonymous" when the page needs none.
type actorKey struct{}

func actorOf(r *http.Request) string {
	if a, ok := r.Context().Value(actorKey{}).(string); ok {
		return a
	}
	return "anonymous"
}

// authed requires one of the tokens (when any is configured): 401 without
// a token or with an ended session, 403 with a wrong token, 429 for an
// address that sent too many wrong ones. Browsers get the login form with
// it.
func (u *UI) authed(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(u.cfg.Tokens) == 0 {
			h(w, r)
			return
		}
		if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			if tok, ok := u.checkToken(w, r, strings.TrimSpace(v), "bearer"); ok {
				h(w, r.WithContext(contextWithActor(r, tok.Name)))
			}
			return
		}
		c, err := r.Cookie(uiTokenCookie)
		if err != nil || c.Value == "" {
			u.denied(w, r, http.StatusUnauthorized, "This page needs the admin token.")
			return
		}
		name, ok := u.sessionName(c.Value, u.now())
		if !ok {
			// An old or forged cookie is not a guess at a token (the
			// cookie is a MAC under a per-process secret): no count.
			u.authedLog.warn(r.Context(), u.logger, u.now(), "operator page: session cookie ended or not valid", "remote", r.RemoteAddr)
			http.SetCookie(w, &http.Cookie{Name: uiTokenCookie, Value: "", Path: UIPath, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
			u.denied(w, r, http.StatusUnauthorized, "Your session ended (a login lasts 12 hours, and a restart ends it): log in again.")
			return
		}
		h(w, r.WithContext(contextWithActor(r, name)))
	})
}

// checkToken checks a token presented by r: it answers 429 when r's
// address sent too many wrong tokens, 403 when this one is wrong (and
// counts it), and otherwise returns the token.
func (u *UI) checkToken(w http.ResponseWriter, r *http.Request, secret, via string) (AdminToken, bool) {
	now, addr := u.now(), clientAddr(r)
	if wait := u.guard.blocked(addr, now); wait > 0 {
		u.tooManyWrongTokens(w, r, wait)
		return AdminToken{}, false
	}
	if tok, ok := u.tokenOf(secret); ok {
		return tok, true
	}
	if !u.guard.failed(addr, now) {
		u.tooManyWrongTokens(w, r, u.guard.blocked(addr, now))
		return AdminToken{}, false
	}
	u.wrongLog.warn(r.Context(), u.logger, now, "operator page: wrong admin token", "via", via, "remote", r.RemoteAddr, "path", r.URL.Path)
	if via == "login" {
		u.render(w, r, http.StatusForbidden, "login", map[string]any{"Message": "That admin token is not valid.", "Next": safeNext(r.PostFormValue("next"))})
	} else {
		u.denied(w, r, http.StatusForbidden, "That admin token is not valid.")
	}
	return AdminToken{}, false
}

func (u *UI) tooManyWrongTokens(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	wait = max(wait, time.Second)
	msg := fmt.Sprintf("Too many wrong admin tokens from %s: try again in %d s.", clientAddr(r), int(wait.Round(time.Second)/time.Second))
	if r.Method == http.MethodPost && r.URL.Path == UIPath+"login" {
		w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		u.render(w, r, http.StatusTooManyRequests, "login", map[string]any{"Message": msg, "Next": safeNext(r.PostFormValue("next"))})
		return
	}
	adminProblem(w, http.StatusTooManyRequests, ProblemTooManyWrongTokens, "Too many wrong admin tokens", msg, wait)
}

// mac is the HMAC-SHA256 of parts under the page's per-process secret
// (the first part names what it is for, so one MAC never passes for
// another).
func (u *UI) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, u.secret)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// sessionValue is the login cookie of token t: its expiry and a MAC of
// the expiry and the token. The cookie never holds the token, and it dies
// with the process.
func (u *UI) sessionValue(t AdminToken, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return exp + "." + hex.EncodeToString(u.mac("session", exp, t.Name, t.Secret))
}

// sessionName returns the name of the token whose session v is, while it
// lasts.
func (u *UI) sessionName(v string, now time.Time) (string, bool) {
	exp, macHex, ok := strings.Cut(v, ".")
	sec, err := strconv.ParseInt(exp, 10, 64)
	got, err2 := hex.DecodeString(macHex)
	if !ok || err != nil || err2 != nil || now.Unix() >= sec {
		return "", false
	}
	for _, t := range u.cfg.Tokens {
		if hmac.Equal(got, u.mac("session", exp, t.Name, t.Secret)) {
			return t.Name, true
		}
	}
	return "", false
}

// setFlash keeps a notice for the next page this browser loads: a
// short-lived cookie with a MAC, so that no link can make the page say
// something (a forged or changed cookie is ignored).
func (u *UI) setFlash(w http.ResponseWriter, r *http.Request, msg string) {
	v := base64.RawURLEncoding.EncodeToString([]byte(msg)) + "." + hex.EncodeToString(u.mac("flash", msg))
	http.SetCookie(w, &http.Cookie{Name: uiFlashCookie, Value: v, Path: UIPath, MaxAge: 60, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// takeFlash returns the notice setFlash kept, once.
func (u *UI) takeFlash(w http.ResponseWriter, r *http.Request) (string, bool) {
	c, err := r.Cookie(uiFlashCookie)
	if err != nil {
		return "", false
	}
	http.SetCookie(w, &http.Cookie{Name: uiFlashCookie, Value: "", Path: UIPath, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	b64, macHex, _ := strings.Cut(c.Value, ".")
	msg, err := base64.RawURLEncoding.DecodeString(b64)
	got, err2 := hex.DecodeString(macHex)
	if err != nil || err2 != nil || !hmac.Equal(got, u.mac("flash", string(msg))) {
		return "", false
	}
	return string(msg), true
}

// tokenOf returns the configured token equal to secret, comparing every
// token in constant time.
func (u *UI) tokenOf(secret string) (AdminToken, bool) {
	var tok AdminToken
	found := 0
	for _, t := range u.cfg.Tokens {
		if subtle.ConstantTimeCompare([]byte(secret), []byte(t.Secret)) == 1 && found == 0 {
			tok, found = t, 1
		}
	}
	return tok, found == 1
}

func (u *UI) denied(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if strings.HasSuffix(r.URL.Path, ".part") || r.Method != http.MethodGet {
		http.Error(w, msg, status)
		return
	}
	u.render(w, r, status, "login", map[string]any{"Message": msg, "Next": r.URL.RequestURI()})
}

// csrfToken returns the token forms carry: an HMAC of the browser's CSRF
// cookie, which it sets when missing.
func (u *UI) csrfToken(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(uiCSRFCookie)
	val := ""
	if err == nil && len(c.Value) >= 32 {
		val = c.Value
	} else {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		val = base64.RawURLEncoding.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{Name: uiCSRFCookie, Value: val, Path: UIPath, HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	}
	return hex.EncodeToString(u.mac("csrf", val))
}

// checkCSRF reports whether a form's csrf field matches the browser's
// cookie.
func (u *UI) checkCSRF(r *http.Request) bool {
	c, err := r.Cookie(uiCSRFCookie)
	if err != nil || len(c.Value) < 32 {
		return false
	}
	got, err := hex.DecodeString(r.PostFormValue("csrf"))
	if err != nil {
		return false
	}
	return hmac.Equal(got, u.mac("csrf", c.Value))
}

func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) {
	if len(u.cfg.Tokens) == 0 {
		http.Redirect(w, r, UIPath, http.StatusSeeOther)
		return
	}
	u.render(w, r, http.StatusOK, "login", map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if !u.checkCSRF(r) {
		http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
		return
	}
	if len(u.cfg.Tokens) == 0 {
		http.Redirect(w, r, UIPath, http.StatusSeeOther)
		return
	}
	tok, ok := u.checkToken(w, r, strings.TrimSpace(r.PostFormValue("token")), "login")
	if !ok {
		return
	}
	expires := u.now().Add(SessionLifetime)
	http.SetCookie(w, &http.Cookie{Name: uiTokenCookie, Value: u.sessionValue(tok, expires), Path: UIPath, Expires: expires,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	u.logger.InfoContext(r.Context(), "operator page: login", "actor", tok.Name, "remote", r.RemoteAddr)
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

func (u *UI) logout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if !u.checkCSRF(r) {
		http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: uiTokenCookie, Value: "", Path: UIPath, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, UIPath+"login", http.StatusSeeOther)
}

// safeNext keeps a post-login redirect on the operator page.
func safeNext(next string) string {
	if !strings.HasPrefix(next, UIPath) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return UIPath
	}
	return next
}

// render writes the page name with data, adding what every page needs.
func (u *UI) render(w http.ResponseWriter, r *http.Request, status int, name string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["CSRF"] = u.csrfToken(w, r)
	data["Title"] = u.cfg.Title
	data["Auth"] = len(u.cfg.Tokens) > 0
	data["Actor"] = actorOf(r)
	data["Now"] = u.now().UTC()
	var b strings.Builder
	if err := u.pages[name].ExecuteTemplate(&b, "page", data); err != nil {
		u.logger.ErrorContext(r.Context(), "operator page: template failed", "page", name, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, b.String())
}

// renderPart writes one fragment of a page (the live parts the script
// refreshes).
func (u *UI) renderPart(w http.ResponseWriter, r *http.Request, page, part string, data map[string]any) {
	var b strings.Builder
	if err := u.pages[page].ExecuteTemplate(&b, part, data); err != nil {
		u.logger.ErrorContext(r.Context(), "operator page: template failed", "part", part, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = io.WriteString(w, b.String())
}

// storeError shows a failed store call.
func (u *UI) storeError(w http.ResponseWriter, r *http.Request, what string, err error) {
	u.logger.WarnContext(r.Context(), "operator page: store call failed", "op", what, "err", err)
	u.render(w, r, http.StatusServiceUnavailable, "error", map[string]any{"Message": what + " failed: " + err.Error()})
}

// recordURL links to one record's detail.
func recordURL(scope, key string) string {
	return UIPath + "record?" + url.Values{"scope": {scope}, "key": {key}}.Encode()
}
