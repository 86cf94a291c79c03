package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/e2e/stores"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// chromiumPath is Debian's chromium (apt-get install chromium).
const chromiumPath = "/usr/bin/chromium"

// operatorScreenshot is where TestOperatorPageInBrowser leaves a picture of
// the overview, relative to this package, when
// RETRYSAFE_UPDATE_SCREENSHOT=1 (an ordinary run leaves the tree clean).
var operatorScreenshot = filepath.Join("..", "..", "docs", "operator-page.png")

// evilKey is a key an attacker could send: the page must show it as text.
const evilKey = `<script>alert(1)</script>`

// TestOperatorPageInBrowser drives the operator page in headless Chromium
// against a gateway on SQLite and on PostgreSQL: records appear while
// requests run (the live table refreshes itself), the filters narrow the
// list, a record opens, a delete asks for confirmation and then lets the
// key run again, and a key holding <script> is shown as text and never
// runs.
func TestOperatorPageInBrowser(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Unreachable(t, "chromium at "+chromiumPath+" (apt-get install chromium)", err)
	}
	for _, b := range []struct {
		name       string
		open       func(testing.TB) retrysafe.Store
		screenshot bool
	}{
		{"sqlite", func(t testing.TB) retrysafe.Store { return stores.SQLite(t) }, true},
		{"postgres", func(t testing.TB) retrysafe.Store { return stores.Postgres(t) }, false},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			operatorPageScenario(t, b.open(t), b.screenshot)
		})
	}
}

// slowUpstream answers POST /payments after a pause (so that records are
// seen processing), and holds POST /stuck until the test ends (so its
// lease runs out: an unknown outcome).
func slowUpstream(t *testing.T) *httptest.Server {
	release := make(chan struct{})
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/stuck":
			select {
			case <-release:
			case <-r.Context().Done():
			}
			http.Error(w, "gave up", http.StatusGatewayTimeout)
			return
		case "/refunds":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"title":"already refunded"}`)
			return
		}
		time.Sleep(150 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Note", `<img src=x onerror="alert(2)">`)
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id":"pay_%d","note":"<b>bold?</b>"}`, n.Add(1))
	}))
	t.Cleanup(func() {
		close(release)
		srv.Close()
	})
	return srv
}

func post(t *testing.T, base, path, key, auth, body string) (int, string) {
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := testenv.HTTPClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func operatorPageScenario(t *testing.T, store retrysafe.Store, screenshot bool) {
	up := slowUpstream(t)
	upURL, _ := url.Parse(up.URL)
	var logBuf bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logBuf.Write(p)
	}), nil))
	gw, err := gateway.New(gateway.Config{
		Upstream: upURL, Store: store, Logger: logger,
		UpstreamTimeout: 2 * time.Second,
		Defaults: func() gateway.Policy {
			p := gateway.DefaultPolicy()
			p.Lease = 3 * time.Second
			return p
		}(),
		Routes: []gateway.Route{
			{Pattern: "POST /payments", Policy: gateway.DefaultPolicy()},
			{Pattern: "POST /refunds", Policy: gateway.DefaultPolicy()},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(gw)
	adminSrv := httptest.NewServer(gw.AdminHandler())
	defer proxy.Close()
	defer adminSrv.Close()

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox, // Chromium runs as root here
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 1250),
	)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()
	ctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()

	// Any JavaScript dialog means a script from the data ran.
	var dialogs atomic.Int64
	if err := chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		return s
	}
	eval := func(expr string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return n
	}
	waitFor := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			t.Fatalf("waiting for %s (%s): %v", what, expr, err)
		}
	}
	base := adminSrv.URL + "/ui/"
	// filter fills one field of the records form and submits it, then
	// waits for the new page (the old one is marked, so it cannot be
	// mistaken for the answer).
	filter := func(what, sel, value string) {
		t.Helper()
		do(what, chromedp.Navigate(base+"records"), chromedp.WaitVisible("#filters"),
			chromedp.Evaluate[chromedp.Void](`window.oldPage = true`),
			chromedp.SetValue(sel, value), chromedp.Click("#apply"))
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
				`!window.oldPage && document.readyState === "complete" && !!document.querySelector("#records, #no-records")`))
			if err == nil && ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the filtered page did not load (%v)", what, err)
			}
		}
	}

	// 1. The records page is open, empty; requests start; they appear in
	// the table without a reload (the script refreshes it).
	do("open the records page", chromedp.Navigate(base+"records"), chromedp.WaitVisible("#no-records"))
	do("mark the page", chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("live-%02d", i)
			post(t, proxy.URL, "/payments", key, "Bearer alice", `{"amount":100}`)
			if i%3 == 0 {
				post(t, proxy.URL, "/payments", key, "Bearer alice", `{"amount":100}`) // replayed
				post(t, proxy.URL, "/payments", key, "Bearer alice", `{"amount":999}`) // mismatch
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	waitFor("a record seen processing while its request runs",
		`[...document.querySelectorAll('#records tr.state-processing td.key')].some(td => td.textContent.startsWith('live-'))`)
	waitFor("five live records", `document.querySelectorAll('#records tbody tr').length >= 5`)
	if eval(`window.notReloaded === true ? 1 : 0`) != 1 {
		t.Fatal("the page was reloaded: the records did not appear through the live refresh")
	}
	close(stop)
	wg.Wait()

	// More traffic for the overview: a conflict, a failure stored, a key
	// whose outcome stays unknown, a key meant to break the page.
	conflictDone := make(chan struct{})
	go func() {
		defer close(conflictDone)
		post(t, proxy.URL, "/payments", "dup-1", "Bearer bob", `{"amount":5}`)
	}()
	time.Sleep(30 * time.Millisecond)
	post(t, proxy.URL, "/payments", "dup-1", "Bearer bob", `{"amount":5}`)
	<-conflictDone
	post(t, proxy.URL, "/refunds", "refund-7", "Bearer bob", `{"amount":5}`)
	if code, body := post(t, proxy.URL, "/payments", `"`+evilKey+`"`, "Bearer mallory", `{"amount":1}`); code != http.StatusCreated {
		t.Fatalf("POST with the <script> key: %d %s", code, body)
	}
	post(t, proxy.URL, "/payments", strings.Repeat("k", 300), "", `{}`) // invalid key
	stuck := make(chan struct{})
	go func() {
		defer close(stuck)
		post(t, proxy.URL, "/stuck", "stuck-42", "Bearer carol", `{"amount":7}`)
	}()
	<-stuck // the upstream timeout (2s) left the key locked until its 3s lease ends

	// 2. Filters: a key prefix, then the state of unknown outcomes.
	filter("filter by prefix", `input[name="prefix"]`, "live-0")
	keys := func() []string {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#records tbody td.key')].map(td => td.textContent)`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	got := keys()
	if len(got) == 0 || len(got) > 10 {
		t.Fatalf("prefix live-0: %d rows (%v)", len(got), got)
	}
	for _, k := range got {
		if !strings.HasPrefix(k, "live-0") {
			t.Errorf("prefix live-0 shows %q", k)
		}
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st, err := store.(admin.Admin).Stats(t.Context(), &admin.StatsParams{Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if st.LeaseExpired == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease of stuck-42 did not run out: %+v", st)
		}
	}
	filter("filter unknown outcomes", `select[name="state"]`, "unknown")
	if got := keys(); len(got) != 1 || got[0] != "stuck-42" {
		t.Errorf("state unknown: %v, want stuck-42", got)
	}
	filter("filter by identity", `input[name="identity"]`, "Bearer bob")
	if got := keys(); strings.Join(got, ",") != "dup-1,refund-7" {
		t.Errorf("identity Bearer bob: %v, want dup-1, refund-7", got)
	}
	filter("filter by route", `input[name="route"]`, "POST /refunds")
	if got := keys(); strings.Join(got, ",") != "refund-7" {
		t.Errorf("route POST /refunds: %v, want refund-7", got)
	}

	// 3. The <script> key is text, in the list and on its page.
	// The identity is posted: the address the browser shows holds its
	// scope, never the credential.
	filter("find the <script> key", `input[name="identity"]`, "Bearer mallory")
	loc, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(loc, "mallory") || !strings.Contains(loc, "scope="+scopehash.Sum("Bearer mallory")) {
		t.Errorf("after the identity filter the address is %s: want its scope, never the credential", loc)
	}
	if got := keys(); len(got) != 1 || got[0] != evilKey {
		t.Fatalf("identity Bearer mallory: %q, want the literal %q", got, evilKey)
	}
	do("open it", chromedp.Click(`#records td.key a`), chromedp.WaitVisible("#rec-key"))
	if got := text("#rec-key"); got != evilKey {
		t.Errorf("record page key = %q, want the literal %q", got, evilKey)
	}
	if n := eval(`document.querySelectorAll('main script, main img').length`); n != 0 {
		t.Errorf("the record page holds %d script or img elements from the data", n)
	}
	do("show the body", chromedp.Click("#show-body"), chromedp.WaitVisible("#body-text"))
	if body := text("#body-text"); !strings.Contains(body, `"note":"<b>bold?</b>"`) {
		t.Errorf("body shown as %q", body)
	}
	if n := eval(`document.querySelectorAll('main b, main img').length`); n != 0 {
		t.Errorf("markup from the stored response became %d elements", n)
	}

	// 4. Open a record from the list, delete it: the confirmation says the
	// client can run the operation again; afterwards the key runs as new.
	do("open live-03", chromedp.Navigate(base+"records?prefix=live-03"), chromedp.WaitVisible("#records"),
		chromedp.Click(`#records td.key a`), chromedp.WaitVisible("#rec-key"))
	if got := text("#rec-key"); got != "live-03" {
		t.Fatalf("opened %q, want live-03", got)
	}
	if st := text("#rec-status"); !strings.HasPrefix(st, "201") {
		t.Errorf("stored status %q, want 201", st)
	}
	do("ask to delete", chromedp.Click("#delete"), chromedp.WaitVisible("#confirm-text"))
	if c := text("#confirm-text"); !strings.Contains(c, "the client can run the operation again") {
		t.Errorf("the confirmation says %q", c)
	}
	do("confirm", chromedp.Click("#confirm-delete"), chromedp.WaitVisible("#flash"))
	if f := text("#flash"); !strings.Contains(f, "live-03") || !strings.Contains(f, "runs as new") {
		t.Errorf("after the delete the page says %q", f)
	}
	recs, err := store.(admin.Admin).Find(t.Context(), &admin.FindParams{Key: "live-03"})
	if err != nil || len(recs) != 0 {
		t.Fatalf("live-03 after the delete: %d records, %v", len(recs), err)
	}
	logMu.Lock()
	logged := logBuf.String()
	logMu.Unlock()
	if !strings.Contains(logged, "record deleted") || !strings.Contains(logged, "actor=anonymous") {
		t.Errorf("the delete is not in the log with its actor")
	}

	// 5. The overview: the unknown outcome listed first, the rates drawn,
	// the oldest request in flight.
	inflight := make(chan struct{})
	go func() {
		defer close(inflight)
		post(t, proxy.URL, "/stuck", "inflight-1", "Bearer dave", `{"amount":8}`)
	}()
	defer func() { <-inflight }() // the upstream timeout ends it
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := store.(admin.Admin).Stats(t.Context(), &admin.StatsParams{Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if st.OldestInFlight != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("inflight-1 never showed as in flight")
		}
	}
	do("open the overview", chromedp.Navigate(base), chromedp.WaitVisible("#chart"))
	if got := text("#oldest"); !strings.Contains(got, "inflight-1") {
		t.Errorf("oldest in flight: %q, want inflight-1", got)
	}
	if got := text("#unknown"); !strings.Contains(got, "stuck-42") {
		t.Errorf("unknown outcomes: %q, want stuck-42", got)
	}
	if n := eval(`document.querySelectorAll('#chart rect.bar').length`); n == 0 {
		t.Error("the chart has no bars")
	}
	for _, outcome := range []string{"new", "replayed", "conflict", "mismatch", "invalid"} {
		if n := eval(`+document.querySelector('#rates td[data-outcome="` + outcome + `"]').textContent`); n == 0 {
			t.Errorf("the rates show no %s request", outcome)
		}
	}
	if dialogs.Load() != 0 {
		t.Fatalf("%d JavaScript dialogs opened: data ran as script", dialogs.Load())
	}

	if !screenshot {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	path := filepath.Join(t.TempDir(), "operator-page.png")
	if os.Getenv("RETRYSAFE_UPDATE_SCREENSHOT") == "1" {
		path = operatorScreenshot
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
