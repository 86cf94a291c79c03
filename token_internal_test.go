package retrysafe

import "testing"

// TestNewToken: tokens are 32 lower-case hex digits and distinct.
func TestNewToken(t *testing.T) {
	seen := make(map[string]bool)
	for range 10000 {
		tok := NewToken()
		if len(tok) != 32 {
			t.Fatalf("token %q: %d characters, want 32", tok, len(tok))
		}
		for i := 0; i < len(tok); i++ {
			if c := tok[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				t.Fatalf("token %q: not lower-case hex", tok)
			}
		}
		if seen[tok] {
			t.Fatalf("token %q made twice", tok)
		}
		seen[tok] = true
	}
}
