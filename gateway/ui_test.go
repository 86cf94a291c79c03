package gateway_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/memory"
)

const aliceToken = "alice-0123456789abcdef"

// String returns what was written so far.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// uiEnv is a gateway on a memory store with an upstream, its log, and a
// browser-like client (cookie jar, no redirects followed).
type uiEnv struct {
	gw    *testGateway
	store *memory.Store
	log   *syncBuffer
	c     *http.Client
}

func newUIEnv(t *testing.T, tokens ...gateway.AdminToken) *uiEnv {
	t.Helper()
	up := newUpstream(t)
	st := testenv.Memory(t)
	log := &syncBuffer{}
	gw := startGateway(t, gateway.Config{
		Upstream: mustURL(t, up.URL), Store: st, AdminTokens: tokens,
		Logger: slog.New(slog.NewTextHandler(log, nil)),
	})
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &uiEnv{gw: gw, store: st, log: log, c: c}
}

// get fetches an admin path with optional extra headers ("Name: value").
func (e *uiEnv) get(t *testing.T, path string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.gw.AdminURL+path, nil)
	for _, h := range hdr {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	res, err := e.c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func (e *uiEnv) post(t *testing.T, path string, form url.Values, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.gw.AdminURL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, h := range hdr {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	res, err := e.c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF field in the page:\n%s", page)
	}
	return m[1]
}

func (e *uiEnv) exists(t *testing.T, scope, key string) bool {
	t.Helper()
	recs, err := e.store.Find(t.Context(), &admin.FindParams{Key: key, Scope: scope, ScopeSet: true})
	if err != nil {
		t.Fatal(err)
	}
	return len(recs) == 1
}

func TestUIRequiresToken(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t, gateway.AdminToken{Name: "alice", Secret: aliceToken})
	if r := send(t, e.gw.URL, "POST", "/payments", "k1", `{"amount":1}`); r.Status != 201 {
		t.Fatalf("POST: %s", r)
	}
	for _, path := range []string{"/ui/", "/ui/records", "/ui/records.part", "/ui/overview.part", "/ui/record?scope=" + testScope + "&key=k1", "/ui/delete?scope=" + testScope + "&key=k1"} {
		if code, body := e.get(t, path); code != http.StatusUnauthorized || strings.Contains(body, `id="detail"`) || strings.Contains(body, `id="records"`) || strings.Contains(body, "count-completed") {
			t.Errorf("GET %s without a token: %d, want 401 without the record", path, code)
		}
		if code, _ := e.get(t, path, "Authorization: Bearer wrong-token-0123456789"); code != http.StatusForbidden {
			t.Errorf("GET %s with a wrong token: %d, want 403", path, code)
		}
		if code, _ := e.get(t, path, "Authorization: Bearer "+aliceToken); code != http.StatusOK {
			t.Errorf("GET %s with the token: %d, want 200", path, code)
		}
	}
	// Static assets are public (they hold no data): the login page needs them.
	if code, body := e.get(t, "/ui/static/ui.js"); code != http.StatusOK || !strings.Contains(body, "data-refresh") {
		t.Errorf("GET /ui/static/ui.js: %d", code)
	}
	// A delete without a token is refused before anything else.
	if code, _ := e.post(t, "/ui/delete", url.Values{"scope": {testScope}, "key": {"k1"}, "confirm": {"yes"}}); code != http.StatusUnauthorized {
		t.Errorf("POST /ui/delete without a token: %d, want 401", code)
	}
	if !e.exists(t, testScope, "k1") {
		t.Fatal("the record is gone after a refused delete")
	}

	// The login form: a wrong token is refused, the right one sets the
	// cookie, and then the pages open.
	code, page := e.get(t, "/ui/login")
	if code != http.StatusOK {
		t.Fatalf("GET /ui/login: %d", code)
	}
	csrf := csrfOf(t, page)
	if code, _ := e.post(t, "/ui/login", url.Values{"csrf": {csrf}, "token": {"nope-nope-nope-nope"}, "next": {"/ui/records"}}); code != http.StatusForbidden {
		t.Errorf("login with a wrong token: %d, want 403", code)
	}
	if code, _ := e.post(t, "/ui/login", url.Values{"token": {aliceToken}}); code != http.StatusForbidden {
		t.Errorf("login without the CSRF token: %d, want 403", code)
	}
	if code, _ := e.post(t, "/ui/login", url.Values{"csrf": {csrf}, "token": {aliceToken}, "next": {"/ui/records"}}); code != http.StatusSeeOther {
		t.Fatalf("login: %d, want 303", code)
	}
	code, page = e.get(t, "/ui/record?scope="+testScope+"&key=k1")
	if code != http.StatusOK || !strings.Contains(page, `id="rec-key">k1<`) {
		t.Fatalf("record page after login: %d", code)
	}
	// Delete as alice: the log names her.
	_, confirm := e.get(t, "/ui/delete?scope="+testScope+"&key=k1")
	if code, _ := e.post(t, "/ui/delete", url.Values{"csrf": {csrfOf(t, confirm)}, "scope": {testScope}, "key": {"k1"}, "confirm": {"yes"}}); code != http.StatusSeeOther {
		t.Fatalf("delete: %d, want 303", code)
	}
	if e.exists(t, testScope, "k1") {
		t.Fatal("the record is still there after the delete")
	}
	logged := e.log.String()
	if !strings.Contains(logged, "record deleted") || !strings.Contains(logged, "actor=alice") {
		t.Errorf("the delete was not logged with who did it:\n%s", logged)
	}
	// The same audit line as "retrysafe keys delete" writes: what, the
	// record, and its state before.
	for _, want := range []string{`msg="audit: record deleted"`, "audit=true", `via="operator page"`, "scope=" + testScope,
		"key_sha256=" + scopehash.Sum("k1")[:16], "state_before=completed", "status_before=201", "attempt=1", "result=done"} {
		if !strings.Contains(logged, want) {
			t.Errorf("the delete's audit line lacks %s:\n%s", want, logged)
		}
	}
	if strings.Contains(logged, "key=k1") {
		t.Errorf("the log holds the key itself:\n%s", logged)
	}
}

func TestUIDeleteNeedsCSRFToken(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t)
	if r := send(t, e.gw.URL, "POST", "/payments", "k1", `{"amount":1}`); r.Status != 201 {
		t.Fatalf("POST: %s", r)
	}
	code, confirm := e.get(t, "/ui/delete?scope="+testScope+"&key=k1")
	if code != http.StatusOK {
		t.Fatalf("confirmation page: %d", code)
	}
	if !strings.Contains(confirm, "the client can run the operation again") {
		t.Errorf("the confirmation does not say that the client can run the operation again:\n%s", confirm)
	}
	csrf := csrfOf(t, confirm)
	form := func(csrf string) url.Values {
		return url.Values{"csrf": {csrf}, "scope": {testScope}, "key": {"k1"}, "confirm": {"yes"}}
	}
	if code, _ := e.post(t, "/ui/delete", url.Values{"scope": {testScope}, "key": {"k1"}, "confirm": {"yes"}}); code != http.StatusForbidden {
		t.Errorf("delete without a CSRF token: %d, want 403", code)
	}
	if code, _ := e.post(t, "/ui/delete", form(strings.Repeat("0", 64))); code != http.StatusForbidden {
		t.Errorf("delete with a wrong CSRF token: %d, want 403", code)
	}
	// A valid token from another browser (another CSRF cookie) does not
	// pass with this browser's cookie.
	other := newUIEnvClient(e)
	_, otherPage := other.get(t, "/ui/delete?scope="+testScope+"&key=k1")
	if code, _ := e.post(t, "/ui/delete", form(csrfOf(t, otherPage))); code != http.StatusForbidden {
		t.Errorf("delete with another browser's CSRF token: %d, want 403", code)
	}
	if code, _ := e.post(t, "/ui/delete", form(csrf), "Sec-Fetch-Site: cross-site"); code != http.StatusForbidden {
		t.Errorf("cross-site delete: %d, want 403", code)
	}
	if code, _ := e.post(t, "/ui/delete", url.Values{"csrf": {csrf}, "scope": {testScope}, "key": {"k1"}}); code != http.StatusBadRequest {
		t.Errorf("unconfirmed delete: %d, want 400", code)
	}
	if !e.exists(t, testScope, "k1") {
		t.Fatal("a refused delete deleted the record")
	}
	code, _ = e.post(t, "/ui/delete", form(csrf))
	if code != http.StatusSeeOther || e.exists(t, testScope, "k1") {
		t.Fatalf("delete with the CSRF token: %d (record still there: %v)", code, e.exists(t, testScope, "k1"))
	}
	if !strings.Contains(e.log.String(), "actor=anonymous") {
		t.Errorf("the delete was not logged with its actor:\n%s", e.log.String())
	}
	// The key runs as new again.
	if r := send(t, e.gw.URL, "POST", "/payments", "k1", `{"amount":1}`); r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("after the delete the key replays: %s", r)
	}
}

// newUIEnvClient returns e with a client of its own (another browser).
func newUIEnvClient(e *uiEnv) *uiEnv {
	jar, _ := cookiejar.New(nil)
	c := *e
	c.c = &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &c
}

var rowRE = regexp.MustCompile(`<tr class="state-[a-z]+">\s*<td class="key"><a href="[^"]*">([^<]*)</a>`)

func rows(page string) []string {
	var keys []string
	for _, m := range rowRE.FindAllStringSubmatch(page, -1) {
		keys = append(keys, m[1])
	}
	return keys
}

// TestUIServerRenderedTables reads the pages as a browser without
// JavaScript would: filters, pagination, detail, escaping.
func TestUIServerRenderedTables(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t)
	for i := range 55 {
		key := "order-" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		if r := send(t, e.gw.URL, "POST", "/payments", key, `{"amount":1}`, "Authorization", "Bearer alice"); r.Status != 201 {
			t.Fatalf("POST: %s", r)
		}
	}
	evil := `<script>alert(1)</script>`
	if r := send(t, e.gw.URL, "POST", "/payments", `"`+evil+`"`, `{"amount":2}`, "Authorization", "Bearer bob"); r.Status != 201 {
		t.Fatalf("POST: %s", r)
	}
	// An unknown outcome: a processing record whose lease ran out.
	now := time.Now()
	if _, err := e.store.Claim(t.Context(), &retrysafe.ClaimParams{Scope: scopehash.Sum("Bearer carol"), Key: "stuck-1",
		Fingerprint: "fp", Token: retrysafe.NewToken(), Now: now.Add(-time.Hour), Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}

	code, page := e.get(t, "/ui/")
	if code != http.StatusOK {
		t.Fatalf("overview: %d", code)
	}
	unknownAt, ratesAt := strings.Index(page, `id="unknown"`), strings.Index(page, `id="rates"`)
	if unknownAt < 0 || ratesAt < 0 || unknownAt > ratesAt || !strings.Contains(page[unknownAt:ratesAt], "stuck-1") {
		t.Errorf("overview: the unknown outcomes (stuck-1) are not listed first")
	}
	for _, want := range []string{`id="count-unknown">1<`, `id="count-processing">1<`, `id="count-completed">56<`, `data-outcome="new">56<`} {
		if !strings.Contains(page, want) {
			t.Errorf("overview lacks %s", want)
		}
	}

	_, page = e.get(t, "/ui/records")
	got := rows(page)
	if len(got) != 50 || !strings.Contains(page, `id="next"`) {
		t.Fatalf("first page: %d rows (next link: %v), want 50 and a next page", len(got), strings.Contains(page, `id="next"`))
	}
	next := regexp.MustCompile(`href="([^"]*)" id="next"`).FindStringSubmatch(page)[1]
	_, page2 := e.get(t, strings.ReplaceAll(next, "&amp;", "&"))
	if got2 := rows(page2); len(got2) != 7 || strings.Contains(page2, `id="next"`) {
		t.Errorf("second page: %d rows, want 7 and no next page", len(got2))
	}

	_, page = e.get(t, "/ui/records?prefix=order-c")
	if got := rows(page); len(got) != 3 || got[0] != "order-ca" {
		t.Errorf("prefix order-c: %v, want order-ca, order-cb, order-cc", got)
	}
	_, page = e.get(t, "/ui/records?state=unknown")
	if got := rows(page); len(got) != 1 || got[0] != "stuck-1" {
		t.Errorf("state unknown: %v, want stuck-1", got)
	}
	// The identity filter is posted; the page redirects to its scope.
	if code, _ := e.post(t, "/ui/records", url.Values{"identity": {"Bearer bob"}}); code != http.StatusSeeOther {
		t.Fatalf("POST /ui/records: %d, want 303", code)
	}
	_, page = e.get(t, "/ui/records?scope="+scopehash.Sum("Bearer bob"))
	if got := rows(page); len(got) != 1 || got[0] != `&lt;script&gt;alert(1)&lt;/script&gt;` {
		t.Errorf("identity Bearer bob: %v, want the <script> key, escaped", got)
	}
	if strings.Contains(page, evil) {
		t.Error("the records page holds the key unescaped")
	}
	_, page = e.get(t, "/ui/records?scope="+scopehash.Sum("Bearer alice")+"&state=completed&prefix=order-a")
	if got := rows(page); len(got) != 26 {
		t.Errorf("scope of alice, completed, prefix order-a: %d rows, want 26", len(got))
	}
	if code, page := e.get(t, "/ui/records?from=yesterday"); code != http.StatusBadRequest || !strings.Contains(page, `id="problem"`) {
		t.Errorf("a bad time: %d, want 400 with the problem shown", code)
	}
	future := time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04")
	if _, page := e.get(t, "/ui/records?from="+future); len(rows(page)) != 0 {
		t.Errorf("updated from an hour ahead: %d rows, want none", len(rows(page)))
	}

	// The detail shows the stored status and headers, the body only on request.
	_, page = e.get(t, "/ui/record?"+url.Values{"scope": {scopehash.Sum("Bearer bob")}, "key": {evil}}.Encode())
	if strings.Contains(page, evil) || !strings.Contains(page, `&lt;script&gt;alert(1)&lt;/script&gt;`) {
		t.Error("the record page does not show the key escaped")
	}
	if !strings.Contains(page, `id="rec-status">201 Created<`) || !strings.Contains(page, "Content-Type") {
		t.Errorf("the record page lacks the stored status or headers")
	}
	if strings.Contains(page, `"amount":2`) || strings.Contains(page, `id="body-text"`) || !strings.Contains(page, `id="show-body"`) {
		t.Errorf("the body is shown before it was asked for")
	}
	_, page = e.get(t, "/ui/record?"+url.Values{"scope": {scopehash.Sum("Bearer bob")}, "key": {evil}, "body": {"1"}}.Encode())
	if !strings.Contains(page, `id="body-text"`) {
		t.Errorf("the body is not shown after the click")
	}
	if !strings.Contains(e.log.String(), "response body viewed") {
		t.Errorf("viewing a body was not logged")
	}
	// Every page carries a strict Content-Security-Policy.
	res, err := e.c.Get(e.gw.AdminURL + "/ui/records")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
}

// The operator page is served on the admin listener only, never by the
// proxy.
func TestUINotOnProxy(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: testenv.Memory(t)})
	r := send(t, gw.URL, "GET", "/ui/", "", "")
	if strings.Contains(string(r.Body), "retrysafe ·") {
		t.Errorf("the proxy port serves the operator page")
	}
	if r := send(t, gw.AdminURL, "GET", "/ui/", "", ""); r.Status != 200 {
		t.Errorf("admin /ui/: %s", r)
	}
}

func TestParseAdminTokens(t *testing.T) {
	t.Parallel()
	toks, err := gateway.ParseAdminTokens(strings.NewReader("# ops\nalice 0123456789abcdef0\n\nfedcba9876543210xx\n"))
	if err != nil || len(toks) != 2 || toks[0].Name != "alice" || toks[0].Secret != "0123456789abcdef0" || toks[1].Name != "token 4" || toks[1].Secret != "fedcba9876543210xx" {
		t.Fatalf("ParseAdminTokens = %+v, %v", toks, err)
	}
	for name, in := range map[string]string{
		"short":  "alice short\n",
		"empty":  "# nothing\n",
		"spaces": "alice 0123456789abcdef 0123\n",
	} {
		if _, err := gateway.ParseAdminTokens(strings.NewReader(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestUIRouteFilter: records keep the pattern of the route that claimed
// them; the page shows it and filters by it.
func TestUIRouteFilter(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	st := testenv.Memory(t)
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: st, Routes: []gateway.Route{
		{Pattern: "POST /payments", Policy: gateway.DefaultPolicy()},
		{Pattern: "POST /orders/{id}/refunds", Policy: gateway.DefaultPolicy()},
	}})
	e := &uiEnv{gw: gw, store: st, c: &http.Client{Timeout: 10 * time.Second}}
	for _, r := range []struct{ path, key string }{
		{"/payments", "p-1"}, {"/payments", "p-2"}, {"/orders/7/refunds", "r-1"}, {"/other", "o-1"},
	} {
		if res := send(t, gw.URL, "POST", r.path, r.key, `{"amount":1}`); res.Status != 201 {
			t.Fatalf("POST %s: %s", r.path, res)
		}
	}
	for route, want := range map[string]string{
		"POST /payments":            "p-1,p-2",
		"POST /orders/{id}/refunds": "r-1",
		"":                          "o-1,p-1,p-2,r-1",
	} {
		_, page := e.get(t, "/ui/records?"+url.Values{"route": {route}}.Encode())
		if got := strings.Join(rows(page), ","); got != want {
			t.Errorf("route %q: %s, want %s", route, got, want)
		}
	}
	_, page := e.get(t, "/ui/records")
	if !strings.Contains(page, `<option value="POST /orders/{id}/refunds">`) {
		t.Error("the route filter does not offer the configured routes")
	}
	_, page = e.get(t, "/ui/record?scope="+testScope+"&key=r-1")
	if !strings.Contains(page, `id="rec-route">POST /orders/{id}/refunds<`) {
		t.Error("the record page does not show the route")
	}
}
