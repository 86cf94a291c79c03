package postgres

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"
)

// Times are stored as Unix nanoseconds (bigint), so every time a caller
// passes in round-trips exactly: PostgreSQL's timestamptz keeps only
// microseconds. The zero time.Time is stored as NULL. Representable times
// run from 1677 to 2262.

var (
	minTime = time.Unix(0, -1<<63)
	maxTime = time.Unix(0, 1<<63-1)
)

// nanos converts t to Unix nanoseconds; the zero time becomes nil (NULL).
func nanos(t time.Time) (*int64, error) {
	if t.IsZero() {
		return nil, nil
	}
	n, err := mustNanos(t)
	return &n, err
}

// mustNanos converts a non-zero t to Unix nanoseconds.
func mustNanos(t time.Time) (int64, error) {
	if t.Before(minTime) || t.After(maxTime) {
		return 0, fmt.Errorf("postgres: time %s out of the storable range (1677-2262)", t.UTC().Format(time.RFC3339))
	}
	return t.UnixNano(), nil
}

// fromNanos converts stored nanoseconds back; NULL becomes the zero time.
func fromNanos(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return time.Unix(0, *n).UTC()
}

// Header encoding: a version byte, then the number of names, then for each
// name (sorted) its length and bytes, the number of values plus one (zero
// for a nil slice) and each value's length and bytes; numbers are uvarints.
// It keeps every byte of names and values, their order, and nil versus
// empty, which JSON would not (invalid UTF-8 would be replaced).
const headerCodecV1 = 1

// encodeHeader returns nil (stored as NULL) for a nil header.
func encodeHeader(h http.Header) []byte {
	if h == nil {
		return nil
	}
	names := make([]string, 0, len(h))
	size := 1 + binary.MaxVarintLen64
	for k, vs := range h {
		names = append(names, k)
		size += len(k) + 2*binary.MaxVarintLen64
		for _, v := range vs {
			size += len(v) + binary.MaxVarintLen64
		}
	}
	sort.Strings(names)
	b := make([]byte, 0, size)
	b = append(b, headerCodecV1)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		vs := h[k]
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		if vs == nil {
			b = binary.AppendUvarint(b, 0)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(vs))+1)
		for _, v := range vs {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

var errBadHeader = errors.New("postgres: corrupt stored header")

// decodeHeader reverses encodeHeader; nil (NULL) gives a nil header.
func decodeHeader(b []byte) (http.Header, error) {
	if b == nil {
		return nil, nil
	}
	if len(b) == 0 || b[0] != headerCodecV1 {
		return nil, errBadHeader
	}
	b = b[1:]
	next := func() (uint64, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, false
		}
		b = b[k:]
		return n, true
	}
	str := func() (string, bool) {
		n, ok := next()
		if !ok || n > uint64(len(b)) {
			return "", false
		}
		s := string(b[:n])
		b = b[n:]
		return s, true
	}
	count, ok := next()
	if !ok || count > uint64(len(b)) {
		return nil, errBadHeader
	}
	h := make(http.Header, count)
	for range count {
		name, ok := str()
		if !ok {
			return nil, errBadHeader
		}
		nv, ok := next()
		if !ok || nv > uint64(len(b))+1 {
			return nil, errBadHeader
		}
		if nv == 0 {
			h[name] = nil
			continue
		}
		vs := make([]string, nv-1)
		for i := range vs {
			if vs[i], ok = str(); !ok {
				return nil, errBadHeader
			}
		}
		h[name] = vs
	}
	if len(b) != 0 {
		return nil, errBadHeader
	}
	return h, nil
}
