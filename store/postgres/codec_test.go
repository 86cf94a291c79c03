package postgres

import (
	"net/http"
	"reflect"
	"testing"
	"time"
)

func TestHeaderCodec(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]http.Header{
		"nil":          nil,
		"empty":        {},
		"nil values":   {"A": nil},
		"empty values": {"A": {}},
		"several":      {"Content-Type": {"application/json"}, "X-Multi": {"a", "", "b, c"}, "X-Bin": {"\x00\xff"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := decodeHeader(encodeHeader(h))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, h) {
				t.Fatalf("round trip: got %#v, want %#v", got, h)
			}
		})
	}
	for name, b := range map[string][]byte{
		"empty":            {},
		"unknown version":  {2, 0},
		"truncated":        {1, 1, 5, 'a'},
		"trailing garbage": {1, 0, 0},
		"huge count":       {1, 0xff, 0xff, 0xff, 0xff, 0x0f},
	} {
		t.Run("corrupt "+name, func(t *testing.T) {
			if _, err := decodeHeader(b); err == nil {
				t.Fatal("decoded corrupt input without error")
			}
		})
	}
}

// FuzzHeaderCodec: whatever decodes re-encodes to the same bytes, and
// nothing panics.
func FuzzHeaderCodec(f *testing.F) {
	f.Add(encodeHeader(http.Header{"A": {"1", "2"}, "B": nil}))
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil || b == nil {
			return
		}
		again, err := decodeHeader(encodeHeader(h))
		if err != nil || !reflect.DeepEqual(again, h) {
			t.Fatalf("re-decoding %#v: %#v, %v", h, again, err)
		}
	})
}

func TestNanos(t *testing.T) {
	t.Parallel()
	if n, err := nanos(time.Time{}); n != nil || err != nil {
		t.Fatalf("zero time: %v, %v; want NULL", n, err)
	}
	tm := time.Date(2031, 3, 4, 5, 6, 7, 123456789, time.FixedZone("x", 3600))
	n, err := nanos(tm)
	if err != nil || !fromNanos(n).Equal(tm) {
		t.Fatalf("round trip of %s: %v, %v", tm, fromNanos(n), err)
	}
	for _, bad := range []time.Time{time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if _, err := mustNanos(bad); err == nil {
			t.Fatalf("%s: no error", bad)
		}
	}
}
