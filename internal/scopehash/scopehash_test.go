package scopehash

import "testing"

func TestSum(t *testing.T) {
	t.Parallel()
	// The SHA-256 of "abc" (FIPS 180-2, appendix B.1).
	const want = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	if got := Sum("abc"); got != want {
		t.Errorf("Sum(string) = %s, want %s", got, want)
	}
	if got := Sum([]byte("abc")); got != want {
		t.Errorf("Sum([]byte) = %s, want %s", got, want)
	}
}
