package retrysafe

import (
	"net/http"
	"slices"
	"testing"
)

// TestCopyHeader checks that copyHeader copies every field's values,
// single and multiple, empty and nil, into slices that share no memory with
// the source, and returns extra spare one-element slots.
func TestCopyHeader(t *testing.T) {
	for _, src := range []http.Header{
		{},
		{"A": {"1"}},
		{"A": {"1", "2", "3"}},
		{"A": {"1"}, "B": {"2", "3"}, "C": {"4"}, "D": nil, "E": {}},
		{"A": {"1", "2"}, "B": {"3", "4"}},
	} {
		for extra := 0; extra <= 2; extra++ {
			dst := http.Header{}
			spare := copyHeader(dst, src, extra)
			if len(spare) != extra {
				t.Fatalf("copyHeader(%v, %d): %d spare, want %d", src, extra, len(spare), extra)
			}
			if len(dst) != len(src) {
				t.Fatalf("copyHeader(%v): %v", src, dst)
			}
			for k, v := range src {
				got, ok := dst[k]
				if !ok || !slices.Equal(got, v) || cap(got) != len(got) {
					t.Fatalf("copyHeader(%v)[%s] = %q (cap %d)", src, k, got, cap(got))
				}
				for i := range got {
					got[i] += "x" // must not reach src or another field
				}
			}
			for i := range spare {
				spare[i] = "spare" // must not reach any field
			}
			for k, v := range src {
				for i := range v {
					if dst[k][i] != v[i]+"x" {
						t.Fatalf("copyHeader(%v): %s shares memory: %q", src, k, dst[k])
					}
				}
			}
		}
	}
}
