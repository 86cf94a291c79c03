package e2e

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/webhook"
	stripewebhook "github.com/stripe/stripe-go/v82/webhook"
)

// TestStripeSignaturesFromStripeGo checks the Stripe scheme against
// signatures made by stripe-go's own webhook.GenerateTestSignedPayload.
func TestStripeSignaturesFromStripeGo(t *testing.T) {
	t.Parallel()
	now := time.Now()
	body := []byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded"}`)
	sign := func(secret string, at time.Time, payload []byte) http.Header {
		h := http.Header{}
		h.Set("Stripe-Signature", stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at}).Header)
		return h
	}
	verifier := func(secrets ...string) *webhook.Verifier {
		v, err := webhook.New(webhook.Config{Scheme: webhook.Stripe, Secrets: secrets, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	reason := func(err error) webhook.Reason {
		var we *webhook.Error
		if errors.As(err, &we) {
			return we.Reason
		}
		return ""
	}
	tampered := append([]byte(nil), body...)
	tampered[10] = 'X'
	dup := sign("whsec_old", now, body)
	dup.Add("Stripe-Signature", dup.Get("Stripe-Signature"))
	for name, tc := range map[string]struct {
		v    *webhook.Verifier
		h    http.Header
		body []byte
		want webhook.Reason
	}{
		"valid":             {verifier("whsec_old"), sign("whsec_old", now, body), body, ""},
		"tampered body":     {verifier("whsec_old"), sign("whsec_old", now, body), tampered, webhook.ReasonBadSignature},
		"wrong secret":      {verifier("whsec_old"), sign("whsec_other", now, body), body, webhook.ReasonBadSignature},
		"rotated: old":      {verifier("whsec_new", "whsec_old"), sign("whsec_old", now, body), body, ""},
		"rotated: new":      {verifier("whsec_new", "whsec_old"), sign("whsec_new", now, body), body, ""},
		"old removed":       {verifier("whsec_new"), sign("whsec_old", now, body), body, webhook.ReasonBadSignature},
		"stale":             {verifier("whsec_old"), sign("whsec_old", now.Add(-6*time.Minute), body), body, webhook.ReasonStaleTimestamp},
		"future":            {verifier("whsec_old"), sign("whsec_old", now.Add(6*time.Minute), body), body, webhook.ReasonStaleTimestamp},
		"within tolerance":  {verifier("whsec_old"), sign("whsec_old", now.Add(-4*time.Minute), body), body, ""},
		"header sent twice": {verifier("whsec_old"), dup, body, webhook.ReasonMalformedHeader},
		"no header":         {verifier("whsec_old"), http.Header{}, body, webhook.ReasonMissingHeader},
	} {
		if got := reason(tc.v.Verify(tc.h, tc.body)); got != tc.want {
			t.Errorf("%s: reason %q, want %q", name, got, tc.want)
		}
	}
}
