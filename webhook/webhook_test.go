package webhook_test

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/webhook"
)

// Test vectors of the Standard Webhooks specification's repository
// (github.com/standard-webhooks/standard-webhooks, libraries/go:
// TestWebhookSign and TestAsymmetricWebhookSign), carried over as data.
const (
	stdVectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	stdVectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	stdVectorTimestamp = "1614265330"
	stdVectorPayload   = `{"test": 2432232314}`
	stdVectorV1        = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	// The Ed25519 seed (the sender's private key) of the asymmetric
	// vector; the receiver gets the public key derived from it.
	stdVectorSeed = "VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="
	stdVectorV1a  = "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag=="
)

// GitHub's documented example ("Validating webhook deliveries"): secret
// "It's a Secret to Everybody", payload "Hello, World!".
const (
	gitHubDocSecret    = "It's a Secret to Everybody"
	gitHubDocPayload   = "Hello, World!"
	gitHubDocSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

func vectorTime() time.Time {
	ts, _ := strconv.ParseInt(stdVectorTimestamp, 10, 64)
	return time.Unix(ts, 0)
}

func newVerifier(t *testing.T, scheme webhook.Scheme, now time.Time, secrets ...string) *webhook.Verifier {
	t.Helper()
	v, err := webhook.New(webhook.Config{Scheme: scheme, Secrets: secrets, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantReason(t *testing.T, err error, reason webhook.Reason) {
	t.Helper()
	var we *webhook.Error
	if !errors.As(err, &we) || we.Reason != reason {
		t.Fatalf("err = %v, want reason %s", err, reason)
	}
}

func publicKey(t *testing.T, seedB64 string) string {
	t.Helper()
	seed, err := base64.StdEncoding.DecodeString(seedB64)
	if err != nil {
		t.Fatal(err)
	}
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	return "whpk_" + base64.StdEncoding.EncodeToString(pub)
}

func TestStandardWebhooksVectors(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("webhook-id", stdVectorID)
	h.Set("webhook-timestamp", stdVectorTimestamp)
	h.Set("webhook-signature", stdVectorV1)
	body := []byte(stdVectorPayload)
	if err := newVerifier(t, webhook.Standard, vectorTime(), stdVectorSecret).Verify(h, body); err != nil {
		t.Fatalf("v1 vector: %v", err)
	}
	// The bare base64 form of the secret is the same key.
	if err := newVerifier(t, webhook.Standard, vectorTime(), strings.TrimPrefix(stdVectorSecret, "whsec_")).Verify(h, body); err != nil {
		t.Fatalf("v1 vector, bare secret: %v", err)
	}
	h.Set("webhook-signature", stdVectorV1a)
	pub := publicKey(t, stdVectorSeed)
	if err := newVerifier(t, webhook.Standard, vectorTime(), pub).Verify(h, body); err != nil {
		t.Fatalf("v1a vector: %v", err)
	}
	// v1a signatures and only an HMAC secret: nothing can be checked.
	wantReason(t, newVerifier(t, webhook.Standard, vectorTime(), stdVectorSecret).Verify(h, body), webhook.ReasonUnknownSecret)
	// Both kinds of key, and several signatures of which one is valid.
	h.Set("webhook-signature", "v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= "+stdVectorV1)
	if err := newVerifier(t, webhook.Standard, vectorTime(), pub, stdVectorSecret).Verify(h, body); err != nil {
		t.Fatalf("several signatures: %v", err)
	}
	// A v1a signature of another body fails with the public key.
	wantReason(t, newVerifier(t, webhook.Standard, vectorTime(), pub).Verify(withHeader(h, "webhook-signature", stdVectorV1a), []byte(`{"test": 1}`)), webhook.ReasonBadSignature)
}

func TestGitHubDocumentedSignature(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("X-Hub-Signature-256", gitHubDocSignature)
	if err := newVerifier(t, webhook.GitHub, time.Now(), gitHubDocSecret).Verify(h, []byte(gitHubDocPayload)); err != nil {
		t.Fatalf("GitHub's example: %v", err)
	}
}

func withHeader(h http.Header, kv ...string) http.Header {
	c := h.Clone()
	for i := 0; i+1 < len(kv); i += 2 {
		c.Set(kv[i], kv[i+1])
	}
	return c
}

func hmacSHA256(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)
}

// A signer makes a delivery's headers as the sender would.
type signer func(secret string, ts time.Time, id string, body []byte) http.Header

func signStandard(secret string, ts time.Time, id string, body []byte) http.Header {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	t := strconv.FormatInt(ts.Unix(), 10)
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", t)
	h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(hmacSHA256(key, []byte(id+"."+t+"."+string(body)))))
	return h
}

func signStripe(secret string, ts time.Time, _ string, body []byte) http.Header {
	t := strconv.FormatInt(ts.Unix(), 10)
	h := http.Header{}
	h.Set("Stripe-Signature", "t="+t+",v1="+hex.EncodeToString(hmacSHA256([]byte(secret), []byte(t+"."+string(body)))))
	return h
}

func signGitHub(secret string, _ time.Time, id string, body []byte) http.Header {
	h := http.Header{}
	h.Set("X-GitHub-Delivery", id)
	h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(hmacSHA256([]byte(secret), body)))
	return h
}

func signShopify(secret string, _ time.Time, id string, body []byte) http.Header {
	h := http.Header{}
	h.Set("X-Shopify-Event-Id", id)
	h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(hmacSHA256([]byte(secret), body)))
	return h
}

var schemes = []struct {
	scheme     webhook.Scheme
	sign       signer
	old, new   string // two secrets of the scheme's form
	sigHeader  string
	timestamps bool // the scheme signs a timestamp
	required   []string
}{
	{webhook.Standard, signStandard, "whsec_" + base64.StdEncoding.EncodeToString([]byte("old-secret-of-32-bytes-for-tests")),
		"whsec_" + base64.StdEncoding.EncodeToString([]byte("new-secret-of-32-bytes-for-tests")), "webhook-signature", true,
		[]string{"webhook-id", "webhook-timestamp", "webhook-signature"}},
	{webhook.Stripe, signStripe, "whsec_old", "whsec_new", "Stripe-Signature", true, []string{"Stripe-Signature"}},
	{webhook.GitHub, signGitHub, "old gh secret", "new gh secret", "X-Hub-Signature-256", false, []string{"X-Hub-Signature-256"}},
	{webhook.Shopify, signShopify, "shpss_old", "shpss_new", "X-Shopify-Hmac-Sha256", false, []string{"X-Shopify-Hmac-Sha256"}},
}

// Every scheme: valid, tampered body, wrong secret, old and rotated
// secrets, stale and future timestamps, duplicate and missing headers.
func TestSchemes(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	body := []byte(`{"id":"evt_1","type":"thing.happened"}`)
	for _, sc := range schemes {
		t.Run(string(sc.scheme), func(t *testing.T) {
			t.Parallel()
			valid := sc.sign(sc.old, now, "evt_1", body)
			v := newVerifier(t, sc.scheme, now, sc.old)
			if err := v.Verify(valid, body); err != nil {
				t.Fatalf("valid: %v", err)
			}
			tampered := append([]byte(nil), body...)
			tampered[len(tampered)-3] ^= 1
			wantReason(t, v.Verify(valid, tampered), webhook.ReasonBadSignature)
			wantReason(t, v.Verify(sc.sign(sc.new, now, "evt_1", body), body), webhook.ReasonBadSignature)

			// Rotation: old and new secrets both verify while both are
			// configured; after the old one is removed, it fails.
			rot := newVerifier(t, sc.scheme, now, sc.new, sc.old)
			for _, s := range []string{sc.old, sc.new} {
				if err := rot.Verify(sc.sign(s, now, "evt_1", body), body); err != nil {
					t.Fatalf("rotation, %q: %v", s, err)
				}
			}
			if err := rot.SetSecrets([]string{sc.new}); err != nil {
				t.Fatal(err)
			}
			wantReason(t, rot.Verify(valid, body), webhook.ReasonBadSignature)
			if err := rot.SetSecrets(nil); err == nil {
				t.Fatal("SetSecrets(nil) accepted")
			}
			if err := rot.Verify(sc.sign(sc.new, now, "evt_1", body), body); err != nil {
				t.Fatalf("a refused SetSecrets changed the secrets: %v", err)
			}

			for _, skew := range []time.Duration{-webhook.DefaultTolerance - time.Second, webhook.DefaultTolerance + time.Second} {
				err := v.Verify(sc.sign(sc.old, now.Add(skew), "evt_1", body), body)
				if sc.timestamps {
					wantReason(t, err, webhook.ReasonStaleTimestamp)
				} else if err != nil {
					t.Fatalf("%s signs no timestamp, yet a delivery %s off failed: %v", sc.scheme, skew, err)
				}
			}
			if sc.timestamps {
				for _, skew := range []time.Duration{-webhook.DefaultTolerance, webhook.DefaultTolerance} {
					if err := v.Verify(sc.sign(sc.old, now.Add(skew), "evt_1", body), body); err != nil {
						t.Fatalf("at the tolerance (%s): %v", skew, err)
					}
				}
			}

			dup := valid.Clone()
			dup.Add(sc.sigHeader, valid.Get(sc.sigHeader))
			wantReason(t, v.Verify(dup, body), webhook.ReasonMalformedHeader)
			for _, name := range sc.required {
				h := valid.Clone()
				h.Del(name)
				wantReason(t, v.Verify(h, body), webhook.ReasonMissingHeader)
			}
			wantReason(t, v.Verify(withHeader(valid, sc.sigHeader, "garbage"), body), webhook.ReasonMalformedHeader)
		})
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]webhook.Config{
		"no scheme":          {Secrets: []string{"s"}},
		"unknown scheme":     {Scheme: "paypal", Secrets: []string{"s"}},
		"no secret":          {Scheme: webhook.GitHub},
		"empty secret":       {Scheme: webhook.GitHub, Secrets: []string{""}},
		"negative tolerance": {Scheme: webhook.GitHub, Secrets: []string{"s"}, Tolerance: -time.Second},
		"not base64":         {Scheme: webhook.Standard, Secrets: []string{"whsec_!!"}},
		"private key":        {Scheme: webhook.Standard, Secrets: []string{"whsk_" + stdVectorSeed}},
		"short public key":   {Scheme: webhook.Standard, Secrets: []string{"whpk_AAAA"}},
	} {
		if _, err := webhook.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestStandardTimestampNotANumber(t *testing.T) {
	t.Parallel()
	h := signStandard(stdVectorSecret, vectorTime(), stdVectorID, []byte("x"))
	h.Set("webhook-timestamp", "yesterday")
	wantReason(t, newVerifier(t, webhook.Standard, vectorTime(), stdVectorSecret).Verify(h, []byte("x")), webhook.ReasonMalformedHeader)
}

func TestStripeHeaderForms(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	body := []byte(`{"id":"evt_1"}`)
	good := signStripe("whsec_a", now, "", body).Get("Stripe-Signature")
	v := newVerifier(t, webhook.Stripe, now, "whsec_a")
	other := "v1=" + strings.Repeat("00", 32)
	for name, tc := range map[string]struct {
		header string
		reason webhook.Reason // "" means valid
	}{
		"several v1, one valid": {good + "," + other, ""},
		"v0 beside":             {good + ",v0=abc", ""},
		"only v0":               {"t=1700000000,v0=" + strings.Repeat("00", 32), webhook.ReasonUnknownSecret},
		"no t":                  {strings.TrimPrefix(good, "t=1700000000,"), webhook.ReasonMalformedHeader},
		"two t":                 {"t=1700000000," + good, webhook.ReasonMalformedHeader},
		"t not a number":        {"t=now," + other, webhook.ReasonMalformedHeader},
		"v1 not hex":            {"t=1700000000,v1=zz", webhook.ReasonMalformedHeader},
		"no v1":                 {"t=1700000000", webhook.ReasonMalformedHeader},
		"wrong v1":              {"t=1700000000," + other, webhook.ReasonBadSignature},
	} {
		err := v.Verify(http.Header{"Stripe-Signature": {tc.header}}, body)
		if tc.reason == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		var we *webhook.Error
		if !errors.As(err, &we) || we.Reason != tc.reason {
			t.Errorf("%s: err %v, want %s", name, err, tc.reason)
		}
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	r, _ := http.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("webhook-id", "msg_1")
	r.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	r.Header.Set("X-Shopify-Webhook-Id", "wh_1")
	body := []byte(`{"id":"evt_9"}`)
	for scheme, want := range map[webhook.Scheme]string{
		webhook.Standard: "msg_1", webhook.Stripe: "evt_9",
		webhook.GitHub: "72d3162e-cc78-11e3-81ab-4c9367dc0958", webhook.Shopify: "wh_1",
	} {
		key, ok, err := newVerifier(t, scheme, time.Now(), "d2hzZWM=").Key()(r, body)
		if key != want || !ok || err != nil {
			t.Errorf("%s: key %q %v %v, want %q", scheme, key, ok, err, want)
		}
	}
	r.Header.Set("X-Shopify-Event-Id", "ev_2")
	if key, _, _ := newVerifier(t, webhook.Shopify, time.Now(), "s").Key()(r, nil); key != "ev_2" {
		t.Errorf("Shopify prefers X-Shopify-Event-Id: got %q", key)
	}
}

func ExampleVerifier_Verify() {
	v, _ := webhook.New(webhook.Config{Scheme: webhook.GitHub, Secrets: []string{gitHubDocSecret}})
	h := http.Header{}
	h.Set("X-Hub-Signature-256", gitHubDocSignature)
	fmt.Println(v.Verify(h, []byte(gitHubDocPayload)))
	fmt.Println(v.Verify(h, []byte("Hello, World?")))
	// Output:
	// <nil>
	// webhook: bad_signature: X-Hub-Signature-256 does not match the body under any configured secret
}
