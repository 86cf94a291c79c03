package redis

import (
	"math/rand/v2"
	"testing"
)

// TestCRC64Jones: the check value of Redis's crc64 (its own self test).
func TestCRC64Jones(t *testing.T) {
	if got := crc64Jones([]byte("123456789")); got != 0xe9c6d914c4b8d9ca {
		t.Fatalf("crc64Jones(123456789) = %#x, want 0xe9c6d914c4b8d9ca", got)
	}
}

// TestCRC64JonesSlicing: eight bytes at a time equals one bit at a time,
// for every length and alignment around the 8-byte steps.
func TestCRC64JonesSlicing(t *testing.T) {
	bitwise := func(b []byte) uint64 {
		var c uint64
		for _, x := range b {
			c ^= uint64(x)
			for range 8 {
				if c&1 == 1 {
					c = c>>1 ^ 0x95ac9329ac4bc9b5
				} else {
					c >>= 1
				}
			}
		}
		return c
	}
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 300)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for start := range 9 {
		for end := start; end <= len(buf); end++ {
			if got, want := crc64Jones(buf[start:end]), bitwise(buf[start:end]); got != want {
				t.Fatalf("crc64Jones(buf[%d:%d]) = %#x, want %#x", start, end, got, want)
			}
		}
	}
}
