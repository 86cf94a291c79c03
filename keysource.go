package retrysafe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// KeyFunc takes a request's idempotency key from somewhere other than the
// Idempotency-Key header (Config.Key). It sees the request and its whole
// body (already read, within Config.MaxBody) and returns the key, ok=false
// when the request carries none (the middleware then treats it as a
// request without Idempotency-Key: it passes through, or gets 400
// missing-key under RequireKey), or an error that says what is wrong
// with it (400 invalid-key, with the error's text as the detail; return a
// *[KeyError] to word the reason yourself). The key it returns is held to
// the rules of every key: 1 to [MaxKeyLength] printable ASCII characters.
//
// The scope stays Config.Scope's: a KeyFunc chooses only the key.
type KeyFunc func(r *http.Request, body []byte) (key string, ok bool, err error)

// KeyFromHeader returns a KeyFunc that reads the key from the first of the
// named headers that the request carries, parsed as [ParseKey] parses an
// Idempotency-Key (a bare token or a Structured-Field string), such as
// KeyFromHeader("X-GitHub-Delivery") or, with a fallback,
// KeyFromHeader("X-Shopify-Event-Id", "X-Shopify-Webhook-Id"). A header
// sent twice is an error, as two Idempotency-Key headers are.
func KeyFromHeader(names ...string) KeyFunc {
	canon := make([]string, len(names))
	for i, n := range names {
		canon[i] = http.CanonicalHeaderKey(n)
	}
	return func(r *http.Request, _ []byte) (string, bool, error) {
		for _, name := range canon {
			values := r.Header[name]
			switch len(values) {
			case 0:
				continue
			case 1:
			default:
				return "", false, &KeyError{Reason: "send exactly one " + name + " header"}
			}
			key, err := ParseKey(values[0])
			if ke, isKey := err.(*KeyError); isKey {
				return "", false, &KeyError{Reason: "the " + name + " header: " + ke.Reason}
			}
			return key, true, nil
		}
		return "", false, nil
	}
}

// KeyFromJSON returns a KeyFunc that reads the key from the JSON body at
// pointer (RFC 6901), such as KeyFromJSON("/id") for a Stripe event or
// KeyFromJSON("/idempotency_key") for AEP-155's request field. The member
// must be a string (taken as it is, without Structured-Field parsing) or
// an integer; it is absent (ok=false) when the body is empty or has no
// such member. A body that is not JSON, or a member of another type, is
// an error. It returns an error for a pointer that is not valid (see
// RFC 6901) or that is "" (the whole body).
func KeyFromJSON(pointer string) (KeyFunc, error) {
	if pointer == "" {
		return nil, fmt.Errorf("retrysafe: KeyFromJSON: the empty pointer is the whole body; name a member such as /id")
	}
	if err := validatePointer(pointer); err != nil {
		return nil, err
	}
	tokens := strings.Split(pointer[1:], "/")
	for i, t := range tokens {
		tokens[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(t)
	}
	return func(_ *http.Request, body []byte) (string, bool, error) {
		if len(bytes.TrimSpace(body)) == 0 {
			return "", false, nil
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var doc any
		if err := dec.Decode(&doc); err != nil {
			return "", false, &KeyError{Reason: "the body is not JSON, so it has no " + pointer + " member: " + err.Error()}
		}
		v, found := lookupPointer(doc, tokens)
		if !found || v == nil {
			return "", false, nil
		}
		switch v := v.(type) {
		case string:
			return v, true, nil
		case json.Number:
			if _, err := strconv.ParseInt(string(v), 10, 64); err == nil {
				return string(v), true, nil
			}
		}
		return "", false, &KeyError{Reason: fmt.Sprintf("the body's %s member is a %T, not a string", pointer, v)}
	}, nil
}

// lookupPointer returns the value that tokens (a decoded JSON Pointer)
// address in doc.
func lookupPointer(doc any, tokens []string) (any, bool) {
	v := doc
	for _, t := range tokens {
		switch node := v.(type) {
		case map[string]any:
			next, ok := node[t]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(node) || (len(t) > 1 && t[0] == '0') {
				return nil, false
			}
			v = node[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// extractKey reads the key of a request with Config.Key set, once its body
// is read. It returns the key, or the outcome of the answer it wrote
// (pass is true when the request carries no key and may pass through).
func (h *protectedHandler) extractKey(w http.ResponseWriter, r *http.Request, body []byte) (key string, outcome Outcome, pass bool) {
	c := h.cfg
	key, ok, err := c.Key(r, body)
	if err == nil && !ok {
		if !c.RequireKey {
			return "", "", true
		}
		WriteProblem(w, c.problem(ProblemMissingKey, "Idempotency key required", http.StatusBadRequest,
			"This endpoint requires an idempotency key and the request carries none. Send it where this endpoint reads it from, the same on every retry."), 0)
		return "", OutcomeMissingKey, false
	}
	if err == nil {
		err = checkKey(key)
	}
	if err != nil {
		detail := err.Error()
		var ke *KeyError
		if errors.As(err, &ke) {
			detail = "The idempotency key is invalid: " + ke.Reason + "."
		}
		WriteProblem(w, c.problem(ProblemInvalidKey, "Invalid idempotency key", http.StatusBadRequest, detail), 0)
		return "", OutcomeInvalidKey, false
	}
	return key, "", false
}
