package retrysafelambda

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/retrysafe/retrysafe"
)

// pointerTokens decodes a valid, non-empty JSON Pointer into its reference
// tokens.
func pointerTokens(p string) []string {
	tokens := strings.Split(p[1:], "/")
	for i, t := range tokens {
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return tokens
}

// lookupRaw returns the JSON text of the member of doc that tokens address,
// decoding one level at a time so that the member's bytes are the
// document's own. found is false when there is no such member; err is set
// when doc (or a level on the way) is not JSON.
func lookupRaw(doc json.RawMessage, tokens []string) (json.RawMessage, bool, error) {
	cur := doc
	for _, t := range tokens {
		switch firstByte(cur) {
		case '{':
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(cur, &obj); err != nil {
				return nil, false, err
			}
			next, ok := obj[t]
			if !ok {
				return nil, false, nil
			}
			cur = next
		case '[':
			var arr []json.RawMessage
			if err := json.Unmarshal(cur, &arr); err != nil {
				return nil, false, err
			}
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(arr) || (len(t) > 1 && t[0] == '0') {
				return nil, false, nil
			}
			cur = arr[i]
		default:
			if !json.Valid(cur) {
				return nil, false, fmt.Errorf("not JSON")
			}
			return nil, false, nil
		}
	}
	return cur, true, nil
}

func firstByte(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c
	}
	return 0
}

// payloadFingerprint is the fingerprint of one payload (an event, a
// message body, a request body) under Config.Validate: the whole payload
// as canonical JSON (raw bytes if it is not JSON), or only the members
// Validate names, an absent member told apart from a null one. method,
// path and query are an API Gateway request's (empty for other events);
// kind tells the event kinds apart.
func (w *wrapper) payloadFingerprint(kind, method, path, query string, payload []byte) (string, error) {
	if w.validate == nil {
		return retrysafe.Fingerprint(method, kind+":"+path, query, payload, nil), nil
	}
	picked := make(map[string]json.RawMessage, len(w.validate))
	for i, tokens := range w.validate {
		v, found, err := lookupRaw(payload, tokens)
		if err != nil {
			return "", fmt.Errorf("%w: its %s member cannot be validated: %w", ErrBadPayload, w.cfg.Validate[i], err)
		}
		if found {
			picked[w.cfg.Validate[i]] = v
		}
	}
	doc, err := json.Marshal(picked)
	if err != nil {
		return "", fmt.Errorf("retrysafe/lambda: the payload's validated members: %w", err)
	}
	return retrysafe.Fingerprint(method, kind+":fields:"+path, query, doc, nil), nil
}
