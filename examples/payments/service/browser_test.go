package service_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/retrysafe/retrysafe/examples/payments/provider"
	"github.com/retrysafe/retrysafe/examples/payments/service"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// chromiumPath is Debian's chromium (apt-get install chromium).
const chromiumPath = "/usr/bin/chromium"

// screenshotPath is where the browser test leaves a picture of the final
// page, relative to this package, when RETRYSAFE_UPDATE_SCREENSHOT=1 (so an
// ordinary test run leaves the working tree clean).
var screenshotPath = filepath.Join("..", "..", "..", "docs", "payments-checkout.png")

// TestCheckoutInBrowser drives the checkout page in headless Chromium: a
// double click on Pay sends one payment and makes one charge; with the
// flaky-network switch on, the first answer of each request is lost and the
// page retries with the same key, and still one charge is made. The page
// shows the final state; the provider's charge count proves it.
func TestCheckoutInBrowser(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Unreachable(t, "chromium at "+chromiumPath+" (apt-get install chromium)", err)
	}
	e := newEnv(t, backends[0], provider.Config{}, func(c *service.Config) { c.SimulatedDrops = true })

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
		chromedp.WindowSize(820, 1000),
	)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		return s
	}
	waitState := func(state string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.WaitVisible(`#status[data-state="`+state+`"]`)); err != nil {
			t.Fatalf("waiting for state %s: %v (page says %q: %q)", state, err, text("#status-title"), text("#status-detail"))
		}
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(e.url+"/"), chromedp.WaitVisible("#pay")); err != nil {
		t.Fatal(err)
	}

	// 1. A double click: the button is disabled while the request is out,
	// so one payment is sent, with the key made when the form rendered.
	key := text("#pay-key")
	if err := chromedp.Do(ctx, chromedp.DoubleClick("#pay")); err != nil {
		t.Fatal(err)
	}
	waitState("succeeded")
	if got := e.psp.ChargeCount(); got != 1 {
		t.Fatalf("after a double click: %d charges, want 1", got)
	}
	if got := text("#attempts"); got != "2" { // POST /orders, POST /payments
		t.Fatalf("after a double click the page sent %s requests, want 2 (log: %s)", got, text("#log"))
	}
	if got := text("#pay-key"); got != key {
		t.Fatalf("payment key changed from %s to %s", key, got)
	}

	// 2. A new payment on a flaky network: each request's first answer is
	// lost after the service ran it; the page retries with the same key
	// and gets the stored answer.
	if err := chromedp.Do(ctx, chromedp.Click("#again"), chromedp.WaitVisible(`#status[data-state="idle"]`),
		chromedp.Click("#flaky"), chromedp.Click("#pay")); err != nil {
		t.Fatal(err)
	}
	key2 := text("#pay-key")
	waitState("succeeded")
	if key2 == key || text("#pay-key") != key2 {
		t.Fatalf("keys: first payment %s, second %s, after retries %s", key, key2, text("#pay-key"))
	}
	if got := e.psp.ChargeCount(); got != 2 {
		t.Fatalf("after the flaky payment: %d charges, want 2", got)
	}
	log := text("#log")
	if !strings.Contains(log, "response lost") || !strings.Contains(log, "replayed") {
		t.Fatalf("the page's log shows no lost and replayed answer: %s", log)
	}
	if detail := text("#status-detail"); !strings.Contains(detail, "charged once") {
		t.Fatalf("final state: %q", detail)
	}

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	path := filepath.Join(t.TempDir(), "payments-checkout.png")
	if os.Getenv("RETRYSAFE_UPDATE_SCREENSHOT") == "1" {
		path = screenshotPath
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}
