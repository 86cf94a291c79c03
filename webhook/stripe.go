package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// ParseStripeSignature parses a Stripe-Signature header value:
// "t=TIMESTAMP,v1=HEX,v1=HEX,v0=…". It returns the timestamp and the v1
// signatures (entries of other schemes are counted in others), and an error
// when t is missing, repeated or not a number, or an entry is not k=v.
func ParseStripeSignature(v string) (ts int64, v1 [][]byte, others int, err error) {
	seenT := false
	for item := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return 0, nil, 0, fmt.Errorf("entry %q is not key=value", clip(item))
		}
		switch k {
		case "t":
			if seenT {
				return 0, nil, 0, errors.New("t is given twice")
			}
			seenT = true
			if ts, err = strconv.ParseInt(val, 10, 64); err != nil {
				return 0, nil, 0, fmt.Errorf("t=%q is not a Unix time in seconds", clip(val))
			}
		case "v1":
			b, err := hex.DecodeString(val)
			if err != nil || len(b) != sha256.Size {
				return 0, nil, 0, fmt.Errorf("v1=%q is not a hex SHA-256", clip(val))
			}
			v1 = append(v1, b)
		default:
			others++
		}
	}
	if !seenT {
		return 0, nil, 0, errors.New("no t= timestamp")
	}
	return ts, v1, others, nil
}

func (v *Verifier) verifyStripe(kr *keyring, h http.Header, body []byte) *Error {
	text, e := one(h, "Stripe-Signature")
	if e != nil {
		return e
	}
	ts, v1, others, err := ParseStripeSignature(text)
	if err != nil {
		return fail(ReasonMalformedHeader, "Stripe-Signature: %v", err)
	}
	if len(v1) == 0 {
		if others > 0 {
			return fail(ReasonUnknownSecret, "Stripe-Signature holds no v1 signature, only other schemes")
		}
		return fail(ReasonMalformedHeader, "Stripe-Signature holds no v1 signature")
	}
	tsText := strconv.FormatInt(ts, 10)
	ok := false
	for _, key := range kr.hmac {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(tsText))
		mac.Write([]byte{'.'})
		mac.Write(body)
		if anyEqual(mac.Sum(nil), v1) {
			ok = true
		}
	}
	if !ok {
		return fail(ReasonBadSignature, "no v1 signature in Stripe-Signature matches the timestamp and body under any configured secret")
	}
	return v.checkTimestamp(ts)
}
