package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
)

// ParseGitHubSignature parses an X-Hub-Signature-256 header value,
// "sha256=HEX", and returns the digest.
func ParseGitHubSignature(v string) ([]byte, error) {
	hexSig, ok := strings.CutPrefix(v, "sha256=")
	if !ok {
		return nil, errors.New("it does not start with sha256=")
	}
	b, err := hex.DecodeString(hexSig)
	if err != nil || len(b) != sha256.Size {
		return nil, errors.New("the digest after sha256= is not a hex SHA-256")
	}
	return b, nil
}

func verifyGitHub(kr *keyring, h http.Header, body []byte) *Error {
	text, e := one(h, "X-Hub-Signature-256")
	if e != nil {
		return e
	}
	sig, err := ParseGitHubSignature(text)
	if err != nil {
		return fail(ReasonMalformedHeader, "X-Hub-Signature-256: %v", err)
	}
	if !bodyMACMatches(kr, body, sig) {
		return fail(ReasonBadSignature, "X-Hub-Signature-256 does not match the body under any configured secret")
	}
	return nil
}

// ParseShopifySignature parses an X-Shopify-Hmac-Sha256 header value, a
// base64 SHA-256 HMAC, and returns the digest.
func ParseShopifySignature(v string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(b) != sha256.Size {
		return nil, errors.New("it is not a base64 SHA-256")
	}
	return b, nil
}

func verifyShopify(kr *keyring, h http.Header, body []byte) *Error {
	text, e := one(h, "X-Shopify-Hmac-Sha256")
	if e != nil {
		return e
	}
	sig, err := ParseShopifySignature(text)
	if err != nil {
		return fail(ReasonMalformedHeader, "X-Shopify-Hmac-Sha256: %v", err)
	}
	if !bodyMACMatches(kr, body, sig) {
		return fail(ReasonBadSignature, "X-Shopify-Hmac-Sha256 does not match the body under any configured secret")
	}
	return nil
}

// bodyMACMatches reports whether sig is the HMAC-SHA256 of body under one
// of the keys; every key is tried, each compared in constant time.
func bodyMACMatches(kr *keyring, body, sig []byte) bool {
	var macs [][]byte
	for _, key := range kr.hmac {
		mac := hmac.New(sha256.New, key)
		mac.Write(body)
		macs = append(macs, mac.Sum(nil))
	}
	return anyEqual(sig, macs)
}
