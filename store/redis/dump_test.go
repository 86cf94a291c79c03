package redis

import "testing"

// TestCRC64Jones: the check value of Redis's crc64 (its own self test).
func TestCRC64Jones(t *testing.T) {
	if got := crc64Jones([]byte("123456789")); got != 0xe9c6d914c4b8d9ca {
		t.Fatalf("crc64Jones(123456789) = %#x, want 0xe9c6d914c4b8d9ca", got)
	}
}
