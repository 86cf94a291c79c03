package httpmethod_test

import (
	"testing"

	"github.com/retrysafe/retrysafe/internal/httpmethod"
)

func TestProtected(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		methods []string
		method  string
		want    bool
	}{
		"default POST":       {nil, "POST", true},
		"default lower post": {nil, "post", true},
		"default mixed":      {nil, "PaTcH", true},
		"default PUT":        {nil, "PUT", false},
		"default GET":        {nil, "get", false},
		"configured lower":   {[]string{"put"}, "PUT", true},
		"configured upper":   {[]string{"PUT"}, "put", true},
		"empty list":         {[]string{}, "POST", false},
		"prefix only":        {[]string{"POST"}, "POS", false},
		"unicode long s":     {nil, "poſt", false}, // Unicode folding would equate ſ with S
		"kelvin sign":        {[]string{"LOCK"}, "LOC\u212a", false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := httpmethod.Protected(tt.methods, tt.method); got != tt.want {
				t.Fatalf("Protected(%q, %q) = %v, want %v", tt.methods, tt.method, got, tt.want)
			}
		})
	}
}

func TestCanonical(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"POST": "POST", "post": "POST", "pAtCh": "PATCH", "m-search": "M-SEARCH", "poſt": "POſT", "": "",
	} {
		if got := httpmethod.Canonical(in); got != want {
			t.Errorf("Canonical(%q) = %q, want %q", in, got, want)
		}
	}
}
