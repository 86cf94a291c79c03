package retrysafe

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"

	"github.com/retrysafe/retrysafe/internal/canonicaljson"
	"github.com/retrysafe/retrysafe/internal/httpmethod"
)

// fingerprintVersion starts every fingerprint's input. Change it whenever
// the encoding below changes, so old and new fingerprints never compare
// equal by accident.
const fingerprintVersion = "retrysafe-fingerprint-v1"

// Fingerprint returns the hex-encoded SHA-256 fingerprint of a request, used
// to tell a genuine retry from a different request reusing the same key. It
// covers:
//
//   - method, with ASCII letters upper-cased (and only those);
//   - path, as given (the middleware gives the escaped path by default,
//     see [Config].FingerprintPath);
//   - the query: its parameters decoded with [url.ParseQuery] (so "%41" and
//     "A" are the same, as are "+" and "%20") and sorted by name; the values
//     of a repeated name keep their request order, since most frameworks
//     read ?acct=1&acct=2 as the list [1 2] or take its first or last value;
//     a query that does not parse is covered as raw text instead;
//   - the body: its canonical JSON without ignore's members when it is
//     JSON, so key order, whitespace, number spelling and the ignored
//     members do not matter; otherwise the raw bytes. An empty body and an
//     absent body are the same.
//
// The canonical JSON has no insignificant whitespace, members sorted by
// name, strings and numbers written one way from their decoded value (1,
// 1.0 and 1e0 are equal, 12345678901234567890 and 12345678901234567891
// are not), and each member that one of the ignore JSON Pointers (RFC
// 6901) addresses removed. A body that is not one JSON value, has
// invalid UTF-8, nests deeper than 1000 levels, or has two members whose
// names are equal, or equal under case folding (which encoding/json
// would read as one field), is hashed as raw bytes.
//
// Every field is length-prefixed and the raw forms are tagged apart from the
// canonical ones, so no two different inputs share a fingerprint by moving
// bytes between fields. The pointers in ignore must be valid JSON Pointers
// (RFC 6901, as Config.IgnoreFields is checked): an invalid pointer makes
// every JSON body fall back to its raw bytes.
func Fingerprint(method, path, rawQuery string, body []byte, ignore []string) string {
	fp, _ := fingerprint(context.Background(), method, path, rawQuery, body, ignore)
	return fp
}

// validatePointer reports whether p is a syntactically valid JSON Pointer
// (RFC 6901): either "" (the whole document) or a sequence of reference
// tokens, each prefixed by '/', in which '~' appears only in the escapes ~0
// ('~') and ~1 ('/'). p must be valid UTF-8.
func validatePointer(p string) error {
	if err := canonicaljson.ValidatePointer(p); err != nil {
		return fmt.Errorf("retrysafe: %w", err)
	}
	return nil
}

// fingerprint is Fingerprint that stops once ctx ends and returns its
// error: the middleware fingerprints under the request's context, so the
// work on a large body ends when the client goes away.
func fingerprint(ctx context.Context, method, path, rawQuery string, body []byte, ignore []string) (string, error) {
	// The input is framed in one buffer, on the stack when the framed
	// fields and a canonical body no longer than body (as it usually is)
	// fit in it.
	var small [512]byte
	b := small[:0]
	if n := 160 + len(method) + len(path) + 2*len(rawQuery) + len(body); n > len(small) {
		b = make([]byte, 0, n)
	}
	b = appendField(b, fingerprintVersion)
	b = appendField(b, httpmethod.Canonical(method))
	b = appendField(b, path)
	b = appendQuery(b, rawQuery)

	// The body's frame is its kind and length, then its bytes. The
	// canonical body's length is known only once it is written after the
	// frame: a placeholder is written and filled in.
	var raw []byte // a body hashed as it is, from where it is
	if len(body) == 0 {
		b = appendField(b, "body-empty")
		b = binary.BigEndian.AppendUint64(b, 0)
	} else {
		frame := len(b)
		b = appendField(b, "body-json")
		lenAt := len(b)
		b = binary.BigEndian.AppendUint64(b, 0)
		canon, err := canonicaljson.Append(ctx, b, body, ignore)
		switch {
		case err == nil:
			binary.BigEndian.PutUint64(canon[lenAt:], uint64(len(canon)-lenAt-8))
			b = canon
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			return "", err
		default: // not JSON as canonicaljson reads it
			b = appendField(b[:frame], "body-raw")
			b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
			raw = body
		}
	}

	var sum [sha256.Size]byte
	if len(b)+len(raw) <= hashChunk {
		sum = sha256.Sum256(append(b, raw...))
	} else {
		var err error
		if sum, err = hashLong(ctx, b, raw); err != nil {
			return "", err
		}
	}
	var hexSum [2 * sha256.Size]byte
	hex.Encode(hexSum[:], sum[:])
	return string(hexSum[:]), nil
}

// hashChunk is how many bytes are hashed between checks of the context.
const hashChunk = 64 << 10

// hashLong returns the SHA-256 of head followed by tail, checking ctx
// after every hashChunk bytes.
func hashLong(ctx context.Context, head, tail []byte) (sum [sha256.Size]byte, err error) {
	h := sha256.New()
	for _, part := range [][]byte{head, tail} {
		for len(part) > 0 {
			n := min(len(part), hashChunk)
			h.Write(part[:n])
			part = part[n:]
			if err := ctx.Err(); err != nil {
				return sum, err
			}
		}
	}
	h.Sum(sum[:0])
	return sum, nil
}

// appendQuery appends the query's frame: its parameters sorted by name,
// or its raw text when it does not parse.
func appendQuery(b []byte, rawQuery string) []byte {
	if rawQuery == "" {
		// What the code below makes of it (no parameters), without
		// ParseQuery's map.
		b = appendField(b, "query")
		return binary.BigEndian.AppendUint64(b, 0)
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		b = appendField(b, "query-raw")
		return appendField(b, rawQuery)
	}
	names := make([]string, 0, len(q))
	n := 0
	for name, values := range q {
		names = append(names, name)
		n += len(values)
	}
	slices.Sort(names)
	b = appendField(b, "query")
	b = binary.BigEndian.AppendUint64(b, uint64(n))
	for _, name := range names {
		for _, v := range q[name] { // in request order
			b = appendField(b, name)
			b = appendField(b, v)
		}
	}
	return b
}

// appendField appends s prefixed by its length.
func appendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}
