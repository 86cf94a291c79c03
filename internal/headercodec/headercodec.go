// Package headercodec encodes an http.Header as bytes that keep every byte
// of every name and value: the SQLite, PostgreSQL and Redis stores keep
// response headers in this form.
//
// The encoding is a version byte ([Version]), then the number of names,
// then for each name (in sorted order) its length and bytes, the number of
// values plus one (zero for a nil slice) and each value's length and bytes;
// numbers are uvarints. It keeps the order of values and nil versus empty.
//
// Stores that wrote headers as JSON before this encoding existed tell the
// two apart by the first byte: JSON text never starts with [Version]
// (0x01). JSON cannot carry bytes that are not UTF-8 (encoding/json
// replaces them with U+FFFD), which is why the encoding replaced it.
package headercodec

import (
	"encoding/binary"
	"errors"
	"net/http"
	"sort"
)

// Version is the first byte of every encoding [Encode] returns.
const Version = 1

// ErrCorrupt is returned by [Decode] for bytes that are not an encoding.
var ErrCorrupt = errors.New("corrupt stored header")

// Encode returns h in the binary encoding; nil for a nil header (stores
// keep that as NULL or an empty field).
func Encode(h http.Header) []byte {
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
	b = append(b, Version)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		b = AppendField(b, k, h[k])
	}
	return b
}

// FieldLen returns the length of AppendField's encoding of one field.
func FieldLen(name string, values []string) int {
	n := uvarintLen(uint64(len(name))) + len(name) + uvarintLen(uint64(len(values))+1)
	for _, v := range values {
		n += uvarintLen(uint64(len(v))) + len(v)
	}
	return n
}

// uvarintLen returns the length of n as a uvarint.
func uvarintLen(n uint64) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}

// AppendField appends the encoding of one header field to b: the name's
// length and bytes, the number of values plus one (zero for nil) and each
// value's length and bytes, as [Encode] writes each name.
func AppendField(b []byte, name string, values []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	if values == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(values))+1)
	for _, v := range values {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// IsEncoded reports whether b starts like an encoding of this package
// (rather than, say, a JSON header written by an older release).
func IsEncoded(b []byte) bool { return len(b) > 0 && b[0] == Version }

// Decode reverses [Encode]: nil gives a nil header, and anything that is not
// exactly one encoding (wrong version, truncated, trailing bytes) gives an
// error wrapping [ErrCorrupt].
func Decode(b []byte) (http.Header, error) {
	if b == nil {
		return nil, nil
	}
	if !IsEncoded(b) {
		return nil, ErrCorrupt
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
	// Every name takes at least two bytes and every value one, so counts
	// larger than what is left are corrupt (and never allocated).
	count, ok := next()
	if !ok || count > uint64(len(b)) {
		return nil, ErrCorrupt
	}
	h := make(http.Header, count)
	for range count {
		name, ok := str()
		if !ok {
			return nil, ErrCorrupt
		}
		if _, dup := h[name]; dup {
			return nil, ErrCorrupt
		}
		nv, ok := next()
		if !ok || nv > uint64(len(b))+1 {
			return nil, ErrCorrupt
		}
		if nv == 0 {
			h[name] = nil
			continue
		}
		vs := make([]string, nv-1)
		for i := range vs {
			if vs[i], ok = str(); !ok {
				return nil, ErrCorrupt
			}
		}
		h[name] = vs
	}
	if len(b) != 0 {
		return nil, ErrCorrupt
	}
	return h, nil
}
