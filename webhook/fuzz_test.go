package webhook_test

import (
	"crypto/sha256"
	"net/http"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/webhook"
)

func FuzzParseStandardSignatures(f *testing.F) {
	for _, s := range []string{stdVectorV1, stdVectorV1a, stdVectorV1 + " " + stdVectorV1a, "v2,AAAA", "v1,", ",", "v1,!!", "  v1,AAAA  "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v1, v1a, err := webhook.ParseStandardSignatures(s)
		if err != nil && (v1 != nil || v1a != nil) {
			t.Fatal("signatures returned with an error")
		}
		for _, sig := range append(v1, v1a...) {
			if len(sig) == 0 {
				t.Fatal("an empty signature was returned")
			}
		}
	})
}

func FuzzParseStripeSignature(f *testing.F) {
	for _, s := range []string{"t=1,v1=" + string(make([]byte, 0)), "t=1492774577,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd,v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39", "t=1,t=2", "v1=00", "", ","} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, v1, _, err := webhook.ParseStripeSignature(s)
		if err != nil && v1 != nil {
			t.Fatal("signatures returned with an error")
		}
		for _, sig := range v1 {
			if len(sig) != sha256.Size {
				t.Fatalf("a v1 signature of %d bytes", len(sig))
			}
		}
	})
}

func FuzzParseGitHubSignature(f *testing.F) {
	for _, s := range []string{gitHubDocSignature, "sha256=", "sha1=00", "sha256=zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if sig, err := webhook.ParseGitHubSignature(s); err == nil && len(sig) != sha256.Size {
			t.Fatalf("a digest of %d bytes", len(sig))
		}
	})
}

func FuzzParseShopifySignature(f *testing.F) {
	for _, s := range []string{"XFAQ0DqR8JrqnPnKE1bS4zHuJSZHJtLBSYZRmFX7FUg=", "", "====", "AAAA"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if sig, err := webhook.ParseShopifySignature(s); err == nil && len(sig) != sha256.Size {
			t.Fatalf("a digest of %d bytes", len(sig))
		}
	})
}

// FuzzVerify feeds every scheme arbitrary header values and bodies: a
// verifier never panics, and never accepts what its secret did not sign.
func FuzzVerify(f *testing.F) {
	f.Add("t=1,v1=00", "msg_1", "1614265330", stdVectorV1, []byte(stdVectorPayload))
	f.Fuzz(func(t *testing.T, sig, id, ts, stdSig string, body []byte) {
		now := time.Unix(1614265330, 0)
		for _, sc := range schemes {
			v := newVerifier(t, sc.scheme, now, sc.old)
			h := http.Header{}
			h.Set("webhook-id", id)
			h.Set("webhook-timestamp", ts)
			h.Set("webhook-signature", stdSig)
			h.Set("Stripe-Signature", sig)
			h.Set("X-Hub-Signature-256", sig)
			h.Set("X-Shopify-Hmac-Sha256", sig)
			if err := v.Verify(h, body); err == nil {
				t.Fatalf("%s accepted a delivery its secret did not sign: %v", sc.scheme, h)
			}
		}
	})
}
