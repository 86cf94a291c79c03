// Package headercodec encodes an http.Header as bytes that keep every byte
// of every name and value: every store keeps response headers in this
// form.
//
// The encoding is a version byte ([Version]), then the number of names,
// then for each name (in sorted order) its length and bytes, the number of
// values plus one (zero for a nil slice) and each value's length and bytes;
// numbers are uvarints. It keeps the order of values and nil versus empty.
// (JSON, which it replaced, cannot carry bytes that are not UTF-8:
// encoding/json replaces them with U+FFFD.)
package headercodec

import (
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
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
	size := 1 + binary.MaxVarintLen64
	for k, vs := range h {
		size += len(k) + 2*binary.MaxVarintLen64
		for _, v := range vs {
			size += len(v) + binary.MaxVarintLen64
		}
	}
	return Append(make([]byte, 0, size), h)
}

// Append appends the encoding of h to b, as [Encode] returns it (nothing
// for a nil header).
func Append(b []byte, h http.Header) []byte {
	if h == nil {
		return b
	}
	var buf [16]string
	names := buf[:0]
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	b = append(b, Version)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		vs := h[k]
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

// Decode reverses [Encode]: nil gives a nil header, and anything that is not
// exactly one encoding (wrong version, truncated, trailing bytes) gives an
// error wrapping [ErrCorrupt]. The header's strings share one copy of b.
func Decode(b []byte) (http.Header, error) {
	if b == nil {
		return nil, nil
	}
	return DecodeString(string(b))
}

// DecodeString is [Decode] for an encoding held in a string, except that
// "" is corrupt (a nil header has no encoding to hold). The header's names
// and values share s's bytes, and the values of all names share one slice,
// each name's capped at its own values (an append to one never reaches
// the next): a header is two allocations.
func DecodeString(s string) (http.Header, error) {
	names, values, ok := scan(s, nil, nil)
	if !ok {
		return nil, ErrCorrupt
	}
	h := make(http.Header, names)
	if _, _, ok := scan(s, h, make([]string, values)); !ok {
		return nil, ErrCorrupt // a name twice
	}
	return h, nil
}

// scan reads the encoding s once: it counts its names and values and
// checks that s is exactly one encoding; with a non-nil h it also fills
// h, its values taken from values (as many as the count). It reports
// false for a corrupt s, and for a name seen twice when it fills h.
func scan(s string, h http.Header, values []string) (names, nvalues int, ok bool) {
	if len(s) == 0 || s[0] != Version {
		return 0, 0, false
	}
	i := 1
	next := func() (int, bool) {
		var n uint64
		for shift := 0; i < len(s) && shift < 64; shift += 7 {
			c := s[i]
			i++
			n |= uint64(c&0x7f) << shift
			if c < 0x80 {
				// Every count and length is bounded by the bytes left,
				// so a larger one is corrupt (and never allocated).
				return int(n), n <= uint64(len(s)-i)+1
			}
		}
		return 0, false
	}
	str := func() (string, bool) {
		n, ok := next()
		if !ok || n > len(s)-i {
			return "", false
		}
		i += n
		return s[i-n : i], true
	}
	count, ok := next()
	if !ok {
		return 0, 0, false
	}
	for range count {
		name, ok := str()
		if !ok {
			return 0, 0, false
		}
		nv, ok := next()
		if !ok {
			return 0, 0, false
		}
		var vs []string
		if nv > 0 {
			if h != nil {
				vs, values = values[:nv-1:nv-1], values[nv-1:]
			}
			for k := range nv - 1 {
				v, ok := str()
				if !ok {
					return 0, 0, false
				}
				if vs != nil {
					vs[k] = v
				}
			}
			nvalues += nv - 1
		}
		if h != nil {
			if _, dup := h[name]; dup {
				return 0, 0, false
			}
			h[name] = vs
		}
	}
	return count, nvalues, i == len(s)
}
