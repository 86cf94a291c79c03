package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// hostRequest sends method path to the admin listener with the Host (and,
// when given, the Origin) a browser would send for that name.
func (e *uiEnv) hostRequest(t *testing.T, method, path, host string, form url.Values) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, e.gw.AdminURL+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Host = host
	req.Header.Set("Origin", "http://"+host)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err := e.c.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// TestUIRefusesForeignHost is the DNS-rebinding attack: a web page whose
// name was rebound to 127.0.0.1 is same-origin in the operator's browser,
// so its requests carry its own name in Host and a matching Origin. They
// are refused with 421 and nothing is read or deleted; loopback names and
// addresses are served.
func TestUIRefusesForeignHost(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t)
	if r := send(t, e.gw.URL, "POST", "/payments", "card-4242", `{"card":"4242424242424242"}`); r.Status != 201 {
		t.Fatalf("POST: %s", r)
	}
	port := e.gw.AdminURL[strings.LastIndex(e.gw.AdminURL, ":"):]
	for _, host := range []string{"rebind.attacker.example" + port, "rebind.attacker.example", "localhost.attacker.example" + port,
		"127.0.0.1.nip.io" + port, "0.0.0.0" + port, "LOCALHOST.evil" + port} {
		for _, path := range []string{"/ui/", "/ui/records", "/ui/records.part", "/ui/record?scope=" + testScope + "&key=card-4242&body=1", "/ui/login"} {
			res, body := e.hostRequest(t, "GET", path, host, nil)
			if res.StatusCode != http.StatusMisdirectedRequest || strings.Contains(body, "card-4242") || strings.Contains(body, "4242424242424242") {
				t.Errorf("GET %s with Host %s: %d, want 421 and no record\n%s", path, host, res.StatusCode, body)
				continue
			}
			var p retrysafe.Problem
			if ct := res.Header.Get("Content-Type"); ct != retrysafe.ContentTypeProblem || json.Unmarshal([]byte(body), &p) != nil ||
				p.Status != 421 || !strings.HasSuffix(p.Type, "/misdirected-host") || !strings.Contains(p.Detail, "--admin-host") {
				t.Errorf("GET %s with Host %s: %s %s, want a misdirected-host problem naming --admin-host", path, host, ct, body)
			}
		}
		// The attacker's page reads the delete form on its own origin
		// (its CSRF cookie and token), then posts it.
		_, confirm := e.hostRequest(t, "GET", "/ui/delete?scope="+testScope+"&key=card-4242", host, nil)
		csrf := ""
		if m := csrfField.FindStringSubmatch(confirm); m != nil {
			csrf = m[1]
		}
		res, _ := e.hostRequest(t, "POST", "/ui/delete", host, url.Values{"csrf": {csrf}, "scope": {testScope}, "key": {"card-4242"}, "confirm": {"yes"}})
		if res.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("POST /ui/delete with Host %s: %d, want 421", host, res.StatusCode)
		}
		if !e.exists(t, testScope, "card-4242") {
			t.Fatalf("a delete with Host %s deleted the record", host)
		}
	}
	// The operator's own browser: loopback names and addresses.
	for _, host := range []string{"127.0.0.1" + port, "localhost" + port, "localhost", "LocalHost." + port, "ops.localhost" + port,
		"[::1]" + port, "[::1]", "127.8.9.10" + port} {
		if res, body := e.hostRequest(t, "GET", "/ui/records", host, nil); res.StatusCode != 200 || !strings.Contains(body, "card-4242") {
			t.Errorf("GET /ui/records with Host %s: %d, want 200 with the record", host, res.StatusCode)
		}
	}
	// Probes and scrapers come by pod IP or service name: they answer any
	// Host, and say nothing about records.
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if res, _ := e.hostRequest(t, "GET", path, "retrysafe.payments.svc.cluster.local:9090", nil); res.StatusCode != 200 {
			t.Errorf("GET %s with a service name as Host: %d, want 200", path, res.StatusCode)
		}
	}
}

var anyURL = regexp.MustCompile(`(?:href|action|src|data-refresh)="([^"]*)"`)

// TestUIIdentityNeverInURL: the identity filter takes a customer's
// credential; it is posted, turned into its scope, and never appears in a
// URL: not in the redirect, a link, a form action or the live-refresh URL.
func TestUIIdentityNeverInURL(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t)
	const cred = "Bearer sk_live_SECRET4242"
	if r := send(t, e.gw.URL, "POST", "/payments", "order-1", `{"amount":1}`, "Authorization", cred); r.Status != 201 {
		t.Fatalf("POST: %s", r)
	}
	_, page := e.get(t, "/ui/records")
	if !strings.Contains(page, `<form method="post" action="/ui/records" class="filters" id="filters">`) {
		t.Errorf("the filter form is not a POST form:\n%s", page)
	}
	code, _ := e.post(t, "/ui/records", url.Values{"identity": {cred}, "state": {"completed"}})
	if code != http.StatusSeeOther {
		t.Fatalf("POST /ui/records: %d, want 303", code)
	}
	req, _ := http.NewRequest("POST", e.gw.AdminURL+"/ui/records", strings.NewReader(url.Values{"identity": {cred}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := e.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	loc := res.Header.Get("Location")
	if strings.Contains(loc, "SECRET4242") || !strings.Contains(loc, "scope="+scopehash.Sum(cred)) {
		t.Fatalf("redirect to %q: want the scope, never the credential", loc)
	}
	code, page = e.get(t, loc)
	if code != 200 || strings.Join(rows(page), ",") != "order-1" {
		t.Fatalf("GET %s: %d, rows %v", loc, code, rows(page))
	}
	if strings.Contains(page, "SECRET4242") {
		t.Errorf("the filtered page holds the credential:\n%s", page)
	}
	urls := anyURL.FindAllStringSubmatch(page, -1)
	if len(urls) < 5 {
		t.Fatalf("found only %d URLs in the page", len(urls))
	}
	sawRefresh := false
	for _, m := range urls {
		if strings.Contains(m[0], "data-refresh") {
			sawRefresh = true
		}
		if u, _ := url.QueryUnescape(m[1]); strings.Contains(u, "SECRET4242") || strings.Contains(u, "identity") {
			t.Errorf("URL %s holds the credential", m[0])
		}
	}
	if !sawRefresh {
		t.Error("no live-refresh URL in the page")
	}
	// A link that carries an identity is refused, and its value is not
	// echoed back.
	code, page = e.get(t, "/ui/records?"+url.Values{"identity": {cred}}.Encode())
	if code != http.StatusBadRequest || strings.Contains(page, "SECRET4242") || !strings.Contains(page, "never in a URL") {
		t.Errorf("GET with ?identity=: %d, want 400 saying why, without the value\n%s", code, page)
	}
}

// sessionCookie returns the value of the page's login cookie in res.
func sessionCookie(res *http.Response) string {
	for _, c := range res.Cookies() {
		if c.Name == "retrysafe_admin" {
			return c.Value
		}
	}
	return ""
}

// TestUISessionCookieIsNotTheToken: the login cookie holds a value derived
// under a per-process secret, not the long-lived token; the raw token in
// the cookie, or a changed cookie, opens nothing.
func TestUISessionCookieIsNotTheToken(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t, gateway.AdminToken{Name: "alice", Secret: aliceToken})
	_, page := e.get(t, "/ui/login")
	req, _ := http.NewRequest("POST", e.gw.AdminURL+"/ui/login", strings.NewReader(url.Values{"csrf": {csrfOf(t, page)}, "token": {aliceToken}, "next": {"/ui/"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := e.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	session := sessionCookie(res)
	if res.StatusCode != http.StatusSeeOther || session == "" {
		t.Fatalf("login: %d, cookie %q", res.StatusCode, session)
	}
	if strings.Contains(session, aliceToken) || strings.Contains(session, aliceToken[6:]) {
		t.Errorf("the cookie holds the token: %q", session)
	}
	if code, _ := e.get(t, "/ui/"); code != 200 {
		t.Errorf("GET /ui/ with the session cookie: %d", code)
	}
	for name, v := range map[string]string{"raw token": aliceToken, "changed": session[:len(session)-1] + "0", "empty mac": strings.Split(session, ".")[0] + "."} {
		if v == session {
			v = session[:len(session)-1] + "1"
		}
		code, _ := e.get(t, "/ui/", "Cookie: retrysafe_admin="+v)
		if code != http.StatusUnauthorized {
			t.Errorf("cookie %s: %d, want 401", name, code)
		}
	}
}

// TestUIWrongTokensRateLimited: an address that sent too many wrong tokens
// gets 429 with Retry-After, even for the right token, until the window
// ends; other addresses are not affected. The log says it once, not once
// per attempt.
func TestUIWrongTokensRateLimited(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t, gateway.AdminToken{Name: "alice", Secret: aliceToken})
	const attempts = 30
	codes := make([]int, attempts)
	var wg sync.WaitGroup
	for i := range attempts {
		wg.Go(func() { codes[i], _ = e.get(t, "/ui/overview.part", "Authorization: Bearer wrong-token-0123456789") })
	}
	wg.Wait()
	counts := map[int]int{}
	for _, c := range codes {
		counts[c]++
	}
	if counts[http.StatusForbidden] != gateway.MaxWrongAdminTokens || counts[http.StatusTooManyRequests] != attempts-gateway.MaxWrongAdminTokens {
		t.Errorf("%d wrong tokens at once: %v, want %d × 403 then 429", attempts, counts, gateway.MaxWrongAdminTokens)
	}
	req, _ := http.NewRequest("GET", e.gw.AdminURL+"/ui/overview.part", nil)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	res, err := e.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
		t.Errorf("the right token from a blocked address: %d (Retry-After %q), want 429 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
	}
	// The login form counts too.
	_, page := e.get(t, "/ui/login")
	if code, _ := e.post(t, "/ui/login", url.Values{"csrf": {csrfOf(t, page)}, "token": {aliceToken}}); code != http.StatusTooManyRequests {
		t.Errorf("login from a blocked address: %d, want 429", code)
	}
	// Another address is served.
	other := httptest.NewRequest("GET", "/ui/overview.part", nil)
	other.RemoteAddr, other.Host = "127.0.0.2:40000", "127.0.0.1:9090"
	other.Header.Set("Authorization", "Bearer "+aliceToken)
	rec := httptest.NewRecorder()
	e.gw.AdminHandler().ServeHTTP(rec, other)
	if rec.Code != 200 {
		t.Errorf("the right token from another address: %d, want 200", rec.Code)
	}
	if n := strings.Count(e.log.String(), "wrong admin token"); n != 1 {
		t.Errorf("the log has %d lines about wrong tokens, want 1:\n%s", n, e.log.String())
	}
}

// addressStore fails its readiness check as a store at a private address
// does.
type addressStore struct{ retrysafe.Store }

func (addressStore) Ping(context.Context) error {
	return retrysafe.Unavailable("ping", errors.New("dial tcp 10.20.30.40:6379: connect: connection refused"))
}

// TestReadyzHidesStoreAddress: the open /readyz says the store does not
// answer, without its host and port; the log has them.
func TestReadyzHidesStoreAddress(t *testing.T) {
	t.Parallel()
	log := &syncBuffer{}
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Store: addressStore{testenv.Memory(t)},
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	for range 3 {
		r := send(t, gw.AdminURL, "GET", "/readyz", "", "")
		if r.Status != 503 || strings.Contains(string(r.Body), "10.20.30.40") || strings.Contains(string(r.Body), "6379") || !strings.Contains(string(r.Body), "not ready") {
			t.Errorf("/readyz: %s, want 503 without the store's address", r)
		}
	}
	if n := strings.Count(log.String(), "10.20.30.40:6379"); n != 1 {
		t.Errorf("the log names the store's address %d times for 3 failed checks, want once:\n%s", n, log.String())
	}
}

// TestUIFlashNotForgeable: the "deleted" notice comes only from a delete
// this browser made, once; a link cannot make the page say it.
func TestUIFlashNotForgeable(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t)
	const phish = "order-9. Your session expired: call +1 555 0100 and read out your admin token"
	code, page := e.get(t, "/ui/records?"+url.Values{"deleted": {phish}}.Encode())
	if code != 200 || strings.Contains(page, "555 0100") || strings.Contains(page, `id="flash"`) {
		t.Errorf("GET /ui/records?deleted=…: %d, the page shows the link's text:\n%s", code, page)
	}
	if r := send(t, e.gw.URL, "POST", "/payments", "order-9", `{"amount":1}`); r.Status != 201 {
		t.Fatalf("POST: %s", r)
	}
	_, confirm := e.get(t, "/ui/delete?scope="+testScope+"&key=order-9")
	req, _ := http.NewRequest("POST", e.gw.AdminURL+"/ui/delete", strings.NewReader(url.Values{"csrf": {csrfOf(t, confirm)}, "scope": {testScope}, "key": {"order-9"}, "confirm": {"yes"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := e.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	loc := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther || strings.Contains(loc, "order-9") {
		t.Fatalf("delete: %d, Location %q: want 303 to a URL without the key", res.StatusCode, loc)
	}
	_, page = e.get(t, loc)
	if !strings.Contains(page, `id="flash"`) || !strings.Contains(page, "order-9") {
		t.Errorf("after the delete the page does not say so:\n%s", page)
	}
	if _, page = e.get(t, loc); strings.Contains(page, `id="flash"`) {
		t.Error("the notice shows again on the next load")
	}
}

// adminServe serves one request from peer to h directly, with Host host,
// as if it arrived on local.
func adminServe(h http.Handler, path, peer, host string, local net.Addr) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	req.RemoteAddr, req.Host = peer, host
	if local != nil {
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, local))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestUIModesAndAdminHosts: --ui off|loopback|on decide who gets the page
// (the probes and /metrics are served in every mode), and --admin-host
// adds names to the Host check.
func TestUIModesAndAdminHosts(t *testing.T) {
	t.Parallel()
	newAdmin := func(mode gateway.UIMode, hosts ...string) http.Handler {
		g, err := gateway.New(gateway.Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Store: testenv.Memory(t), UI: mode, AdminHosts: hosts,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return g.AdminHandler()
	}
	const loopback, remote = "127.0.0.1:50000", "10.0.0.9:50000"
	for _, c := range []struct {
		mode       gateway.UIMode
		peer, host string
		local      net.Addr
		want       int
		problem    string
	}{
		{"", loopback, "127.0.0.1:9090", nil, 200, ""},
		{"", remote, "127.0.0.1:9090", nil, 403, "ui-loopback-only"},
		{gateway.UILoopback, remote, "10.1.2.3:9090", nil, 403, "ui-loopback-only"},
		{gateway.UIOn, remote, "127.0.0.1:9090", nil, 200, ""},
		{gateway.UIOn, remote, "10.1.2.3:9090", &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 9090}, 200, ""},
		{gateway.UIOn, remote, "10.1.2.4:9090", &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 9090}, 421, "misdirected-host"},
		{gateway.UIOn, remote, "ops.example.com:9090", nil, 421, "misdirected-host"},
		{gateway.UIOff, loopback, "127.0.0.1:9090", nil, 404, "ui-off"},
	} {
		rec := adminServe(newAdmin(c.mode), "/ui/", c.peer, c.host, c.local)
		if rec.Code != c.want || (c.problem != "" && !strings.Contains(rec.Body.String(), "/"+c.problem+`"`)) {
			t.Errorf("--ui %q, peer %s, Host %s: %d %s, want %d %s", c.mode, c.peer, c.host, rec.Code, rec.Body, c.want, c.problem)
		}
		for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
			if rec := adminServe(newAdmin(c.mode), p, c.peer, c.host, c.local); rec.Code != 200 {
				t.Errorf("--ui %q, peer %s: GET %s %d, want 200", c.mode, c.peer, p, rec.Code)
			}
		}
	}
	h := newAdmin(gateway.UIOn, "ops.example.com", "retrysafe.internal.")
	for host, want := range map[string]int{"ops.example.com:9090": 200, "OPS.Example.COM": 200, "retrysafe.internal": 200,
		"retrysafe.internal.:9090": 200, "ops.example.com.evil:9090": 421, "example.com": 421} {
		if rec := adminServe(h, "/ui/", remote, host, nil); rec.Code != want {
			t.Errorf("--admin-host ops.example.com, Host %s: %d, want %d", host, rec.Code, want)
		}
	}
	if _, err := gateway.New(gateway.Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Store: testenv.Memory(t), UI: "public"}); err == nil {
		t.Error("UI \"public\": no error")
	}
}

// TestUISessionEnds: a session cookie opens the page for SessionLifetime,
// then the browser is asked to log in again.
func TestUISessionEnds(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	st := testenv.Memory(t)
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Store: st, Now: now,
		AdminTokens: []gateway.AdminToken{{Name: "alice", Secret: aliceToken}}})
	jar, _ := cookiejar.New(nil)
	e := &uiEnv{gw: gw, store: st, log: &syncBuffer{}, c: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	_, page := e.get(t, "/ui/login")
	if code, _ := e.post(t, "/ui/login", url.Values{"csrf": {csrfOf(t, page)}, "token": {aliceToken}}); code != http.StatusSeeOther {
		t.Fatalf("login: %d", code)
	}
	offset.Store(int64(gateway.SessionLifetime - time.Minute))
	if code, _ := e.get(t, "/ui/"); code != 200 {
		t.Errorf("a minute before the session ends: %d, want 200", code)
	}
	offset.Store(int64(gateway.SessionLifetime + time.Second))
	if code, page := e.get(t, "/ui/"); code != http.StatusUnauthorized || !strings.Contains(page, "log in again") {
		t.Errorf("after SessionLifetime: %d, want 401 asking to log in again", code)
	}
}
