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
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
)

//go:embed ui
var uiFiles embed.FS

// UIPath is where the operator page is served.
const UIPath = "/ui/"

// Cookie names of the operator page.
const (
	uiTokenCookie = "retrysafe_admin"
	uiCSRFCookie  = "retrysafe_csrf"
)

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
	// Store is read and changed through retrysafe.Admin, which it must
	// implement. Wrap it with store/sealed and a key ring to show
	// encrypted responses decrypted.
	Store retrysafe.Store
	// Tokens, when not empty, are the credentials every page and action
	// requires (a cookie set by the login form, or an Authorization:
	// Bearer header). Empty means no authentication: only for a listener
	// that nobody else can reach (loopback).
	Tokens []AdminToken
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

	rates *rateRing // the gateway's rates; nil on a standalone page
}

// UI is the operator page: an http.Handler for the paths under [UIPath].
//
//	GET  /ui/                overview: unknown outcomes first, live rates by
//	                         outcome, counts by state, the oldest in flight
//	GET  /ui/records         records with filters, a page at a time
//	GET  /ui/record          one record (?scope=&key=; &body=1 shows the body)
//	GET  /ui/delete          the confirmation of a delete
//	POST /ui/delete          deletes a record (CSRF token required)
//	GET  /ui/login, POST /ui/login, POST /ui/logout
//
// Pages are rendered on the server (html/template); a small script
// refreshes the live parts. Every state-changing request needs the CSRF
// token of its form and is refused cross-origin.
type UI struct {
	cfg    UIConfig
	admin  retrysafe.Admin
	logger *slog.Logger
	now    func() time.Time
	secret []byte // keys the CSRF tokens
	pages  map[string]*template.Template
	static http.Handler
	mux    *http.ServeMux
}

// NewUI returns the operator page for cfg.
func NewUI(cfg UIConfig) (*UI, error) {
	admin, ok := retrysafe.As[retrysafe.Admin](cfg.Store)
	if !ok {
		return nil, errors.New("gateway: the operator page needs a store that implements retrysafe.Admin")
	}
	for _, t := range cfg.Tokens {
		if len(t.Secret) < MinAdminTokenLength {
			return nil, fmt.Errorf("gateway: admin token %q is shorter than %d characters", t.Name, MinAdminTokenLength)
		}
	}
	u := &UI{cfg: cfg, admin: admin, logger: cfg.Logger, now: cfg.Now, secret: make([]byte, 32)}
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
	m.Handle("GET /ui/records.part", u.authed(u.recordsPart))
	m.Handle("GET /ui/record", u.authed(u.record))
	m.Handle("GET /ui/delete", u.authed(u.deleteConfirm))
	m.Handle("POST /ui/delete", u.authed(u.delete))
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
// a token, 403 with a wrong one. Browsers get the login form with it.
func (u *UI) authed(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(u.cfg.Tokens) == 0 {
			h(w, r)
			return
		}
		secret := ""
		if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			secret = strings.TrimSpace(v)
		} else if c, err := r.Cookie(uiTokenCookie); err == nil {
			secret = c.Value
		}
		if secret == "" {
			u.denied(w, r, http.StatusUnauthorized, "This page needs the admin token.")
			return
		}
		name, ok := u.tokenName(secret)
		if !ok {
			u.logger.WarnContext(r.Context(), "operator page: wrong admin token", "remote", r.RemoteAddr, "path", r.URL.Path)
			u.denied(w, r, http.StatusForbidden, "That admin token is not valid.")
			return
		}
		h(w, r.WithContext(contextWithActor(r, name)))
	})
}

func (u *UI) tokenName(secret string) (string, bool) {
	name, found := "", 0
	for _, t := range u.cfg.Tokens {
		if subtle.ConstantTimeCompare([]byte(secret), []byte(t.Secret)) == 1 && found == 0 {
			name, found = t.Name, 1
		}
	}
	return name, found == 1
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
	mac := hmac.New(sha256.New, u.secret)
	mac.Write([]byte(val))
	return hex.EncodeToString(mac.Sum(nil))
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
	mac := hmac.New(sha256.New, u.secret)
	mac.Write([]byte(c.Value))
	return hmac.Equal(got, mac.Sum(nil))
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
	secret := strings.TrimSpace(r.PostFormValue("token"))
	name, ok := u.tokenName(secret)
	if len(u.cfg.Tokens) == 0 || !ok {
		u.logger.WarnContext(r.Context(), "operator page: failed login", "remote", r.RemoteAddr)
		u.render(w, r, http.StatusForbidden, "login", map[string]any{"Message": "That admin token is not valid.", "Next": safeNext(r.PostFormValue("next"))})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: uiTokenCookie, Value: secret, Path: UIPath, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	u.logger.InfoContext(r.Context(), "operator page: login", "actor", name, "remote", r.RemoteAddr)
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
