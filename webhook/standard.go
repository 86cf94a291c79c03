package webhook

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// parseStandardSecret decodes a Standard Webhooks secret: whsec_BASE64
// (or bare BASE64) is an HMAC key, whpk_BASE64 an Ed25519 public key.
func parseStandardSecret(s string) (key []byte, public bool, err error) {
	s = strings.TrimSpace(s)
	switch {
	case strings.HasPrefix(s, "whpk_"):
		key, err = base64.StdEncoding.DecodeString(s[len("whpk_"):])
		if err != nil || len(key) != ed25519.PublicKeySize {
			return nil, false, fmt.Errorf("a whpk_ key must be %d bytes in base64", ed25519.PublicKeySize)
		}
		return key, true, nil
	case strings.HasPrefix(s, "whsk_"):
		return nil, false, errors.New("a whsk_ key is the sender's private key: give the receiver its whpk_ public key")
	}
	key, err = base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
	if err != nil || len(key) == 0 {
		return nil, false, errors.New("a Standard Webhooks secret is whsec_ followed by base64")
	}
	return key, false, nil
}

// standardSignature is one entry of webhook-signature.
type standardSignature struct {
	version string // "v1", "v1a", or another the receiver ignores
	sig     []byte // nil when the entry's base64 is invalid
}

// ParseStandardSignatures parses a webhook-signature header value: entries
// "VERSION,BASE64" separated by spaces. It returns the v1 (HMAC) and v1a
// (Ed25519) signatures it holds, skipping other versions, and an error
// when an entry is not of that form at all.
func ParseStandardSignatures(v string) (v1, v1a [][]byte, err error) {
	entries := strings.Fields(v)
	if len(entries) == 0 {
		return nil, nil, errors.New("no signature")
	}
	for _, e := range entries {
		version, sig, ok := strings.Cut(e, ",")
		if !ok || version == "" {
			return nil, nil, fmt.Errorf("entry %q is not VERSION,SIGNATURE", clip(e))
		}
		b, err := base64.StdEncoding.DecodeString(sig)
		if err != nil || len(b) == 0 {
			return nil, nil, fmt.Errorf("entry %q does not hold a base64 signature", clip(e))
		}
		switch version {
		case "v1":
			v1 = append(v1, b)
		case "v1a":
			v1a = append(v1a, b)
		}
	}
	return v1, v1a, nil
}

func (v *Verifier) verifyStandard(kr *keyring, h http.Header, body []byte) *Error {
	id, e := one(h, "webhook-id")
	if e != nil {
		return e
	}
	tsText, e := one(h, "webhook-timestamp")
	if e != nil {
		return e
	}
	sigText, e := one(h, "webhook-signature")
	if e != nil {
		return e
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fail(ReasonMalformedHeader, "webhook-timestamp %q is not a Unix time in seconds", clip(tsText))
	}
	v1, v1a, err := ParseStandardSignatures(sigText)
	if err != nil {
		return fail(ReasonMalformedHeader, "webhook-signature: %v", err)
	}
	if !(len(v1) > 0 && len(kr.hmac) > 0) && !(len(v1a) > 0 && len(kr.public) > 0) {
		return fail(ReasonUnknownSecret, "webhook-signature holds %d v1 and %d v1a signatures, and the receiver has %d whsec_ secrets and %d whpk_ keys: none can be checked",
			len(v1), len(v1a), len(kr.hmac), len(kr.public))
	}
	msg := make([]byte, 0, len(id)+len(tsText)+2+len(body))
	msg = append(append(append(append(append(msg, id...), '.'), tsText...), '.'), body...)
	ok := false
	for _, key := range kr.hmac {
		mac := hmac.New(sha256.New, key)
		mac.Write(msg)
		if anyEqual(mac.Sum(nil), v1) {
			ok = true
		}
	}
	for _, key := range kr.public {
		for _, sig := range v1a {
			if ed25519.Verify(ed25519.PublicKey(key), msg, sig) {
				ok = true
			}
		}
	}
	if !ok {
		return fail(ReasonBadSignature, "no signature in webhook-signature matches the id, timestamp and body under any configured secret")
	}
	return v.checkTimestamp(ts)
}

// clip shortens a header value quoted in an error.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
