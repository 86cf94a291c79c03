package headercodec

import (
	"bytes"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	var obsText strings.Builder
	for c := 0x80; c <= 0xff; c++ {
		obsText.WriteByte(byte(c))
	}
	for name, h := range map[string]http.Header{
		"nil":          nil,
		"empty":        {},
		"nil values":   {"A": nil},
		"empty values": {"A": {}},
		"several":      {"Content-Type": {"application/json"}, "X-Multi": {"a", "", "b, c"}},
		"obs-text":     {"Content-Disposition": {"attachment; filename=\"r\xe9sum\xe9.pdf\""}, "X-All": {obsText.String()}},
		"binary name":  {"\x00\xff\xfe": {"\x00"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := Encode(h)
			if h != nil && (len(b) == 0 || b[0] != Version) {
				t.Fatalf("Encode(%q) = %x does not start with the version byte", h, b)
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, h) {
				t.Fatalf("round trip: got %#v, want %#v", got, h)
			}
		})
	}
}

func TestDecodeCorrupt(t *testing.T) {
	t.Parallel()
	for name, b := range map[string][]byte{
		"empty":            {},
		"json":             []byte(`{"A":["b"]}`),
		"unknown version":  {2, 0},
		"truncated":        {1, 1, 5, 'a'},
		"trailing garbage": {1, 0, 0},
		"huge count":       {1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"huge value count": {1, 1, 1, 'a', 0xff, 0xff, 0x03},
		"duplicate name":   {1, 2, 1, 'a', 0, 1, 'a', 0},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if h, err := Decode(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode(%x) = %v, %v; want ErrCorrupt", b, h, err)
			}
		})
	}
}

// FuzzRoundTrip: a header built from arbitrary bytes survives Encode and
// Decode exactly.
func FuzzRoundTrip(f *testing.F) {
	f.Add("Content-Disposition", "attachment; filename=\"r\xe9sum\xe9.pdf\"", "X-Bin", "\x00\xff", "", true)
	f.Add("", "", "", "", "\x80", false)
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2, v3 string, nilSecond bool) {
		h := http.Header{n1: {v1, v3}}
		if nilSecond {
			h[n2] = nil
		} else {
			h[n2] = append(h[n2], v2)
		}
		got, err := Decode(Encode(h))
		if err != nil {
			t.Fatalf("Decode(Encode(%q)): %v", h, err)
		}
		if !reflect.DeepEqual(got, h) {
			t.Fatalf("round trip of %q gave %q", h, got)
		}
	})
}

// FuzzDecode: arbitrary bytes never panic; what decodes re-encodes to bytes
// that decode to the same header, and an encoding with sorted names is
// reproduced byte for byte.
func FuzzDecode(f *testing.F) {
	f.Add(Encode(http.Header{"A": {"b", "\xff"}, "C": nil}))
	f.Add([]byte{1, 0})
	f.Add([]byte(`{"A":["b"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b)
		if err != nil {
			return
		}
		enc := Encode(h)
		again, err := Decode(enc)
		if err != nil || !reflect.DeepEqual(again, h) {
			t.Fatalf("Decode(Encode(%q)) = %q, %v", h, again, err)
		}
		if !bytes.Equal(Encode(again), enc) {
			t.Fatalf("encoding of %q is not stable", h)
		}
	})
}

// TestDecodedValuesCapped: the values of all names share one slice, and
// an append to one name's values leaves the next name's alone.
func TestDecodedValuesCapped(t *testing.T) {
	t.Parallel()
	h, err := DecodeString(string(Encode(http.Header{"A": {"1"}, "B": {"2", "3"}})))
	if err != nil {
		t.Fatal(err)
	}
	h["A"] = append(h["A"], "x")
	if want := (http.Header{"A": {"1", "x"}, "B": {"2", "3"}}); !reflect.DeepEqual(h, want) {
		t.Fatalf("after an append to A: %q, want %q", h, want)
	}
	if _, err := DecodeString(""); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("DecodeString(\"\") = %v, want ErrCorrupt", err)
	}
}
