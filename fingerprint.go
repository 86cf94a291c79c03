package retrysafe

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/url"
	"slices"
	"sync"
)

// fingerprintVersion starts every fingerprint's input. Change it whenever
// the encoding below changes, so old and new fingerprints never compare
// equal by accident.
const fingerprintVersion = "retrysafe-fingerprint-v1"

// Fingerprint returns the hex-encoded SHA-256 fingerprint of a request, used
// to tell a genuine retry from a different request reusing the same key. It
// covers:
//
//   - method, with ASCII letters upper-cased ([CanonicalMethod]);
//   - path, as given (the middleware gives the escaped path by default,
//     see [Config].Route);
//   - the query: its parameters decoded with [url.ParseQuery] (so "%41" and
//     "A" are the same, as are "+" and "%20") and sorted by name; the values
//     of a repeated name keep their request order, since most frameworks
//     read ?acct=1&acct=2 as the list [1 2] or take its first or last value;
//     a query that does not parse is covered as raw text instead;
//   - the body: the canonical JSON of body without ignore's fields (canonicaljson.go) when that succeeds, so key
//     order, whitespace, number spelling and the ignored members do not
//     matter; otherwise the raw bytes. An empty body and an absent body are
//     the same.
//
// Every field is length-prefixed and the raw forms are tagged apart from the
// canonical ones, so no two different inputs share a fingerprint by moving
// bytes between fields. Validate ignore with [ValidatePointer] beforehand: an
// invalid pointer makes every JSON body fall back to its raw bytes.
func Fingerprint(method, path, rawQuery string, body []byte, ignore []string) string {
	fp, _ := fingerprint(context.Background(), method, path, rawQuery, body, ignore)
	return fp
}

// fingerprint is Fingerprint that stops once ctx ends and returns its
// error: the middleware fingerprints under the request's context, so the
// work on a large body ends when the client goes away. Every step takes
// time linear in the size of the request (sorting the query's names aside).
func fingerprint(ctx context.Context, method, path, rawQuery string, body []byte, ignore []string) (string, error) {
	// The small fields are framed into one buffer, then the body follows.
	b := make([]byte, 0, 128+len(method)+len(path)+2*len(rawQuery))
	b = appendField(b, fingerprintVersion)
	b = appendField(b, CanonicalMethod(method))
	b = appendField(b, path)

	if q, err := url.ParseQuery(rawQuery); err == nil {
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
	} else {
		b = appendField(b, "query-raw")
		b = appendField(b, rawQuery)
	}

	kind, data := "body-raw", body
	if len(body) == 0 {
		kind, data = "body-empty", nil
	} else {
		buf := bodyPool.Get().(*[]byte)
		defer putBody(buf)
		canon, err := appendCanonicalJSONContext(ctx, (*buf)[:0], body, ignore)
		switch {
		case err == nil:
			kind, data = "body-json", canon
			*buf = canon
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			return "", err
		}
	}
	b = appendField(b, kind)
	b = binary.BigEndian.AppendUint64(b, uint64(len(data)))

	h := sha256.New()
	h.Write(b)
	for len(data) > pollEvery {
		h.Write(data[:pollEvery])
		data = data[pollEvery:]
		if err := ctx.Err(); err != nil {
			return "", err
		}
	}
	h.Write(data)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])), nil
}

// bodyPool recycles the buffers that hold canonical bodies while they are
// hashed.
var bodyPool = sync.Pool{New: func() any { return new([]byte) }}

func putBody(buf *[]byte) {
	if cap(*buf) <= 1<<20 {
		bodyPool.Put(buf)
	}
}

// appendField appends s prefixed by its length.
func appendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}
