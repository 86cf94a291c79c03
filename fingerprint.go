package retrysafe

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"errors"
	"hash"
	"hash/maphash"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
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
	buf := bodyPool.Get().(*fingerprintBuffer)
	fp, err := buf.fingerprint(ctx, method, path, rawQuery, body, ignore)
	if buf.trim() {
		bodyPool.Put(buf)
	}
	return fp, err
}

// fingerprint is the package's fingerprint on buf's memory. Call buf.trim
// afterwards, before buf is kept for another call.
func (buf *fingerprintBuffer) fingerprint(ctx context.Context, method, path, rawQuery string, body []byte, ignore []string) (string, error) {
	// The small fields are framed into one buffer, the canonical body
	// appended after them, and the whole hashed at once.
	b := buf.b[:0]
	b = appendField(b, fingerprintVersion)
	b = appendField(b, CanonicalMethod(method))
	b = appendField(b, path)

	if rawQuery == "" {
		// What the branch below makes of an empty query (no parameters),
		// without its map.
		b = appendField(b, "query")
		b = binary.BigEndian.AppendUint64(b, 0)
	} else if q, err := url.ParseQuery(rawQuery); err == nil {
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

	// The body's frame is its kind and length, then its bytes. The length
	// is known only once the body is canonicalised, after the frame: a
	// placeholder is written and filled in.
	var data []byte // a raw body, hashed from where it is
	switch {
	case len(body) == 0:
		b = appendField(b, "body-empty")
		b = binary.BigEndian.AppendUint64(b, 0)
	default:
		mark := len(b)
		b = appendField(b, "body-json")
		lenAt := len(b)
		b = binary.BigEndian.AppendUint64(b, 0)
		canon, err := buf.parser.appendCanonical(ctx, b, body, ignore)
		switch {
		case err == nil:
			binary.BigEndian.PutUint64(canon[lenAt:], uint64(len(canon)-lenAt-8))
			b = canon
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			buf.b = b
			return "", err
		default:
			b = appendField(b[:mark], "body-raw")
			b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
			data = body
		}
	}
	if len(data) > 0 && len(b)+len(data) <= pollEvery {
		b, data = append(b, data...), nil // small: hashed in one call
	}
	buf.b = b

	var sum [sha256.Size]byte
	if len(b)+len(data) <= pollEvery {
		sum = buf.sum256(b)
	} else {
		h := sha256.New()
		for _, part := range [2][]byte{b, data} {
			for len(part) > pollEvery {
				h.Write(part[:pollEvery])
				part = part[pollEvery:]
				if err := ctx.Err(); err != nil {
					return "", err
				}
			}
			h.Write(part)
		}
		h.Sum(sum[:0])
	}
	var hexSum [2 * sha256.Size]byte
	encodeHex(hexSum[:], sum[:])
	return string(hexSum[:]), nil
}

// bodyPool recycles the buffers that hold a fingerprint's input (the
// framed fields and the canonical body) while it is hashed.
var bodyPool = sync.Pool{New: func() any { return new(fingerprintBuffer) }}

// fingerprintBuffer is a fingerprint's working memory, kept for reuse.
type fingerprintBuffer struct {
	b      []byte            // the input
	h      hash.Hash         // a SHA-256 digest, made on first use
	sum    [sha256.Size]byte // h's result (a local would escape through h)
	parser canonParser       // for the body's canonical JSON
}

// trim lets go of what the last call referenced and reports whether buf
// may be kept for reuse: not when its buffers grew large.
func (buf *fingerprintBuffer) trim() bool {
	return buf.parser.trim() && cap(buf.b) <= 1<<20
}

// sum256 returns sha256.Sum256(b). The first 64 bytes (one SHA-256 block)
// of a fingerprint's input are the version, the method, the path and, for
// a short path, the start of the query's frame: the same for every request
// to a route. So the digest's state after that block (its midstate) is
// cached, and a request whose first block is cached hashes only the rest:
// usually one block of three fewer (SHA-256 compresses 64-byte blocks;
// the benchmark's 126-byte input takes three with the padding).
func (buf *fingerprintBuffer) sum256(b []byte) [sha256.Size]byte {
	if len(b) < sha256.BlockSize {
		return sha256.Sum256(b)
	}
	first := b[:sha256.BlockSize]
	hv := maphash.Bytes(midstateSeed, first)
	slot := &midstates[hv%uint64(len(midstates))]
	if m := slot.m.Load(); m != nil && string(m.block[:]) == string(first) {
		h := buf.hasher()
		if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(m.state); err == nil {
			h.Write(b[sha256.BlockSize:])
			h.Sum(buf.sum[:0])
			return buf.sum
		}
	}
	// A block is cached on its second miss in a row in its slot, so that
	// inputs whose first block is never seen twice (a path with an ID
	// early on, say) do not each pay for a cache entry.
	if slot.seen.Swap(hv) == hv {
		h := buf.hasher()
		h.Reset()
		h.Write(first)
		if state, err := h.(encoding.BinaryMarshaler).MarshalBinary(); err == nil {
			m := &midstate{state: state}
			copy(m.block[:], first)
			slot.m.Store(m)
		}
	}
	return sha256.Sum256(b)
}

func (buf *fingerprintBuffer) hasher() hash.Hash {
	if buf.h == nil {
		buf.h = sha256.New()
	}
	return buf.h
}

// midstate is a SHA-256 digest's state after one block.
type midstate struct {
	block [sha256.BlockSize]byte
	state []byte // the digest after block, in MarshalBinary's form
}

// midstates caches the midstates of recent first blocks, each in the slot
// its hash selects: at most len(midstates) entries, replaced freely; a
// hit compares the whole block, so a collision costs only a miss.
var midstates [256]struct {
	m    atomic.Pointer[midstate]
	seen atomic.Uint64 // the hash of the slot's last missed block
}

var midstateSeed = maphash.MakeSeed()

// appendField appends s prefixed by its length.
func appendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}
