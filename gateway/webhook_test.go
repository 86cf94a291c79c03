package gateway_test

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/store/memory"
)

func gitHubSignature(secret, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// deliverGitHub posts a GitHub delivery, signed with secret ("" sends no
// signature), to the gateway.
func deliverGitHub(t *testing.T, base, path, id, secret, body string) *result {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if id != "" {
		req.Header.Set("X-GitHub-Delivery", id)
	}
	req.Header.Set("X-GitHub-Event", "push")
	if secret != "" {
		req.Header.Set("X-Hub-Signature-256", gitHubSignature(secret, body))
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return &result{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

func webhookGateway(t *testing.T, up *upstream, yaml string, store retrysafe.Store) *testGateway {
	t.Helper()
	routes, err := gateway.ParseConfig([]byte(yaml), gateway.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	return startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store, Defaults: gateway.DefaultPolicy(), Routes: routes})
}

func writeSecrets(t *testing.T, path string, secrets ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("# GitHub webhook secrets\n"+strings.Join(secrets, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A webhook route verifies before the claim (a forged delivery runs and
// stores nothing, and is counted by reason), keys on the event id, scopes
// by the route, replays duplicates, and releases the key after a 5xx.
func TestWebhookRoute(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	dir := t.TempDir()
	secrets := filepath.Join(dir, "github")
	writeSecrets(t, secrets, "It's a Secret to Everybody")
	store := memory.New(memory.Config{})
	t.Cleanup(func() { _ = store.Close() })
	gw := webhookGateway(t, up, `
routes:
  - match: "POST /payments"
    webhook: {scheme: github, secrets_file: `+secrets+`, tolerance: 1m}
  - match: "POST /status/{code}"
    webhook: {scheme: github, secrets_file: `+secrets+`}
`, store)

	body := `{"action":"opened"}`
	forged := deliverGitHub(t, gw.URL, "/payments", "d-1", "a guess", body)
	if forged.Status != http.StatusUnauthorized || problemType(t, forged) != "webhook-signature" {
		t.Fatalf("forged: %s", forged)
	}
	if r := deliverGitHub(t, gw.URL, "/payments", "d-1", "", body); r.Status != http.StatusUnauthorized {
		t.Fatalf("unsigned: %s", r)
	}
	if up.calls.Load() != 0 {
		t.Fatal("a forged delivery reached the upstream")
	}
	scope := "webhook POST /payments"
	if _, err := store.Get(context.Background(), &retrysafe.GetParams{Scope: scope, Key: "d-1", Now: time.Now()}); err == nil {
		t.Fatal("a forged delivery left a record")
	}
	first := deliverGitHub(t, gw.URL, "/payments", "d-1", "It's a Secret to Everybody", body)
	again := deliverGitHub(t, gw.URL, "/payments", "d-1", "It's a Secret to Everybody", body)
	if first.Status != http.StatusCreated || again.Header.Get(retrysafe.HeaderReplayed) != "true" || string(again.Body) != string(first.Body) {
		t.Fatalf("first %s, again %s", first, again)
	}
	if up.calls.Load() != 1 {
		t.Fatalf("upstream ran %d times, want 1", up.calls.Load())
	}
	rec, err := store.Get(context.Background(), &retrysafe.GetParams{Scope: scope, Key: "d-1", Now: time.Now()})
	if err != nil || rec.Route != "POST /payments" {
		t.Fatalf("record: %+v, %v", rec, err)
	}
	// A delivery without X-GitHub-Delivery is verified, then refused: it has no key.
	if r := deliverGitHub(t, gw.URL, "/payments", "", "It's a Secret to Everybody", body); r.Status != http.StatusBadRequest || problemType(t, r) != retrysafe.ProblemMissingKey {
		t.Fatalf("no delivery id: %s", r)
	}

	// 5xx: not stored, so the sender's retry runs again; 4xx is stored.
	for i, want := range []int64{2, 3} {
		if r := deliverGitHub(t, gw.URL, "/status/500", "d-500", "It's a Secret to Everybody", body); r.Status != http.StatusInternalServerError || up.calls.Load() != want {
			t.Fatalf("500 #%d: %s, calls %d", i, r, up.calls.Load())
		}
	}
	deliverGitHub(t, gw.URL, "/status/404", "d-404", "It's a Secret to Everybody", body)
	if r := deliverGitHub(t, gw.URL, "/status/404", "d-404", "It's a Secret to Everybody", body); r.Header.Get(retrysafe.HeaderReplayed) != "true" || up.calls.Load() != 4 {
		t.Fatalf("404 retry: %s, calls %d", r, up.calls.Load())
	}

	metrics := get(t, gw.AdminURL+"/metrics")
	for series, want := range map[string]string{
		`retrysafe_webhook_verification_failures_total{reason="bad_signature",route="POST /payments"}`:      "1",
		`retrysafe_webhook_verification_failures_total{reason="missing_header",route="POST /payments"}`:     "1",
		`retrysafe_webhook_verification_failures_total{reason="stale_timestamp",route="POST /payments"}`:    "0",
		`retrysafe_webhook_verification_failures_total{reason="bad_signature",route="POST /status/{code}"}`: "0",
	} {
		// (metricValue cuts at the first space, and these labels hold one.)
		if !strings.Contains(metrics, "\n"+series+" "+want+"\n") {
			t.Errorf("/metrics lacks %s %s", series, want)
		}
	}
	// The operator page lists the events of one sender: filter by its route.
	page := get(t, gw.AdminURL+"/ui/records?route="+url.QueryEscape("POST /payments"))
	if !strings.Contains(page, "d-1") || strings.Contains(page, "d-404") {
		t.Fatalf("records of route POST /payments: d-1 listed %v, d-404 listed %v", strings.Contains(page, "d-1"), strings.Contains(page, "d-404"))
	}
}

// store_statuses still decides on a webhook route: listing 5xx stores it.
func TestWebhookRouteStoreStatuses(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	secrets := filepath.Join(t.TempDir(), "s")
	writeSecrets(t, secrets, "s3cret")
	gw := webhookGateway(t, up, `
routes:
  - match: "POST /status/{code}"
    store_statuses: [2xx, 4xx, 5xx]
    webhook: {scheme: github, secrets_file: `+secrets+`}
`, storeKinds()[0].open(t))
	deliverGitHub(t, gw.URL, "/status/503", "d", "s3cret", `{}`)
	if r := deliverGitHub(t, gw.URL, "/status/503", "d", "s3cret", `{}`); r.Header.Get(retrysafe.HeaderReplayed) != "true" || up.calls.Load() != 1 {
		t.Fatalf("stored 503 not replayed: %s, calls %d", r, up.calls.Load())
	}
}

// Hot rotation: the secrets file is re-read once it changes, without a
// restart; a file emptied by mistake keeps the secrets in use.
func TestWebhookSecretsRotation(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	secrets := filepath.Join(t.TempDir(), "github")
	writeSecrets(t, secrets, "old-secret")
	gw := webhookGateway(t, up, `
routes:
  - match: "POST /payments"
    webhook: {scheme: github, secrets_file: `+secrets+`}
`, storeKinds()[0].open(t))
	if r := deliverGitHub(t, gw.URL, "/payments", "a", "new-secret", `{}`); r.Status != http.StatusUnauthorized {
		t.Fatalf("new secret before rotation: %s", r)
	}
	writeSecrets(t, secrets, "new-secret", "old-secret")
	n := 0
	eventually(t, 5*time.Second, "the new secret is accepted", func() bool {
		n++
		return deliverGitHub(t, gw.URL, "/payments", "b"+strings.Repeat("x", n), "new-secret", `{}`).Status == http.StatusCreated
	})
	if r := deliverGitHub(t, gw.URL, "/payments", "c", "old-secret", `{}`); r.Status != http.StatusCreated {
		t.Fatalf("old secret during rotation: %s", r)
	}
	writeSecrets(t, secrets) // no secret at all: kept as it was
	time.Sleep(1100 * time.Millisecond)
	if r := deliverGitHub(t, gw.URL, "/payments", "d", "old-secret", `{}`); r.Status != http.StatusCreated {
		t.Fatalf("an empty secrets file dropped the secrets: %s", r)
	}
	writeSecrets(t, secrets, "new-secret")
	eventually(t, 5*time.Second, "the old secret is refused", func() bool {
		n++
		return deliverGitHub(t, gw.URL, "/payments", "e"+strings.Repeat("x", n), "old-secret", `{}`).Status == http.StatusUnauthorized
	})
}

func TestWebhookSecretsFromEnvironment(t *testing.T) {
	t.Setenv("RETRYSAFE_TEST_GITHUB_SECRET", "env-secret")
	up := newUpstream(t)
	gw := webhookGateway(t, up, `
routes:
  - match: "POST /payments"
    webhook: {scheme: github, secrets_env: RETRYSAFE_TEST_GITHUB_SECRET}
`, storeKinds()[0].open(t))
	if r := deliverGitHub(t, gw.URL, "/payments", "a", "env-secret", `{}`); r.Status != http.StatusCreated {
		t.Fatalf("secret from the environment: %s", r)
	}
}

func TestWebhookConfigErrors(t *testing.T) {
	t.Parallel()
	secrets := filepath.Join(t.TempDir(), "s")
	writeSecrets(t, secrets, "x")
	empty := filepath.Join(t.TempDir(), "empty")
	writeSecrets(t, empty)
	for name, tc := range map[string]struct{ yaml, want string }{
		"no scheme":      {`{secrets_file: ` + secrets + `}`, "scheme: required"},
		"unknown scheme": {`{scheme: paypal, secrets_file: ` + secrets + `}`, `"paypal" is not one of`},
		"no secrets":     {`{scheme: stripe}`, "secrets_file or secrets_env"},
		"secret inline":  {`{scheme: stripe, secret: whsec_x}`, "webhook: unknown field secret"},
		"bad tolerance":  {`{scheme: stripe, secrets_file: ` + secrets + `, tolerance: 5}`, "tolerance"},
		"unprotected":    {`{scheme: stripe, secrets_file: ` + secrets + `}` + "\n    protect: false", "protect: false"},
	} {
		_, err := gateway.ParseConfig([]byte("routes:\n  - match: \"POST /hook\"\n    webhook: "+tc.yaml+"\n"), gateway.DefaultPolicy())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to say %q", name, err, tc.want)
		}
	}
	up := newUpstream(t)
	for name, tc := range map[string]struct{ file, want string }{
		"missing file": {filepath.Join(t.TempDir(), "nope"), "no such file"},
		"empty file":   {empty, "holds no secret"},
	} {
		routes, err := gateway.ParseConfig([]byte("routes:\n  - match: \"POST /hook\"\n    webhook: {scheme: github, secrets_file: "+tc.file+"}\n"), gateway.DefaultPolicy())
		if err != nil {
			t.Fatal(err)
		}
		_, err = gateway.New(gateway.Config{Upstream: mustURL(t, up.URL), Store: storeKinds()[0].open(t), Routes: routes})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to say %q", name, err, tc.want)
		}
	}
}

func get(t *testing.T, u string) string {
	t.Helper()
	resp, err := client.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Standard Webhooks (v1a, Ed25519: the gateway holds only the public key)
// and Shopify (key from X-Shopify-Webhook-Id when X-Shopify-Event-Id is
// absent) through webhook routes.
func TestWebhookStandardAndShopifyRoutes(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	dir := t.TempDir()
	seed := make([]byte, ed25519.SeedSize)
	copy(seed, "a fixed seed for this test only!")
	priv := ed25519.NewKeyFromSeed(seed)
	pubFile, shopFile := filepath.Join(dir, "svix"), filepath.Join(dir, "shopify")
	writeSecrets(t, pubFile, "whpk_"+base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)))
	writeSecrets(t, shopFile, "shpss_secret")
	gw := webhookGateway(t, up, `
routes:
  - match: "POST /payments"
    webhook: {scheme: standard, secrets_file: `+pubFile+`}
  - match: "POST /orders/{id}/refunds"
    webhook: {scheme: shopify, secrets_file: `+shopFile+`}
`, storeKinds()[0].open(t))
	post := func(path, body string, hdr ...string) *result {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, gw.URL+path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return &result{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}
	body := `{"type":"invoice.paid"}`
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	sig := "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(priv, []byte("msg_1."+ts+"."+body)))
	for i := range 2 {
		r := post("/payments", body, "webhook-id", "msg_1", "webhook-timestamp", ts, "webhook-signature", sig)
		if r.Status != http.StatusCreated || (i == 1) != (r.Header.Get(retrysafe.HeaderReplayed) == "true") {
			t.Fatalf("standard delivery %d: %s", i, r)
		}
	}
	if r := post("/payments", body+" ", "webhook-id", "msg_1", "webhook-timestamp", ts, "webhook-signature", sig); r.Status != http.StatusUnauthorized {
		t.Fatalf("standard, changed body: %s", r)
	}
	m := hmac.New(sha256.New, []byte("shpss_secret"))
	m.Write([]byte(body))
	shopSig := base64.StdEncoding.EncodeToString(m.Sum(nil))
	for i := range 2 {
		r := post("/orders/7/refunds", body, "X-Shopify-Webhook-Id", "wh-1", "X-Shopify-Hmac-Sha256", shopSig)
		if r.Status != http.StatusCreated || (i == 1) != (r.Header.Get(retrysafe.HeaderReplayed) == "true") {
			t.Fatalf("shopify delivery %d: %s", i, r)
		}
	}
	if up.calls.Load() != 2 {
		t.Fatalf("upstream ran %d times, want 2 (one per event)", up.calls.Load())
	}
}
