package memory

import (
	"encoding/hex"
	"strings"
	"testing"
)

// TestForms: each string is stored in the form expected, comes back
// exactly, and equalText tells it from its near misses.
func TestForms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    string
		form form
		n    int // stored length
	}{
		{"", formRaw, 0},
		{"a", formRaw, 1},                       // odd
		{"ab", formHex, 1},                      // shortest hex
		{"abc", formRaw, 3},                     // odd
		{"AB", formRaw, 2},                      // uppercase hex is not formHex
		{"aB", formRaw, 2},                      // nor mixed
		{"0g", formRaw, 2},                      // not hex
		{strings.Repeat("0f", 32), formHex, 32}, // a fingerprint
		{"0123456789abcdef0123456789abcdef", formHex, 16}, // a token
		{"5f0c6a0e-3b1d-4c8e-9a2b-7d4e1f0a9c3b", formUUID, 16},
		{"5F0C6A0E-3B1D-4C8E-9A2B-7D4E1F0A9C3B", formUUIDUpper, 16},
		{"00000000-0000-4000-8000-000000000001", formUUID, 16}, // digits alone: lowercase
		{"5F0C6A0E-3b1d-4C8E-9A2B-7D4E1F0A9C3B", formRaw, 36},  // mixed case
		{"5f0c6a0e-3b1d-4c8e-9a2b_7d4e1f0a9c3b", formRaw, 36},  // a dash missing
		{"5f0c6a0e3b1d-4c8e-9a2b-7d4e1f0a9c3b0", formRaw, 36},  // dashes elsewhere
		{"5f0c6a0e-3b1d-4c8e-9a2b-7d4e1f0a9c3g", formRaw, 36},  // not hex
		{"ÿ\x00", formRaw, 3},
	} {
		b, f := appendCompact([]byte("prefix"), tc.s)
		p := string(b[len("prefix"):])
		if f != tc.form || len(p) != tc.n || string(b[:len("prefix")]) != "prefix" {
			t.Errorf("appendCompact(%q) = %q, form %d; want %d bytes, form %d", tc.s, b, f, tc.n, tc.form)
			continue
		}
		if got := string(appendText(nil, p, f)); got != tc.s || textLen(p, f) != len(tc.s) {
			t.Errorf("%q came back as %q (length %d)", tc.s, got, textLen(p, f))
		}
		if !equalText(p, f, tc.s) {
			t.Errorf("equalText(%q) = false for itself", tc.s)
		}
		for _, miss := range nearMisses(tc.s) {
			if equalText(p, f, miss) {
				t.Errorf("equalText(%q stored as %d) = true for %q", tc.s, f, miss)
			}
		}
	}
}

// nearMisses returns strings that differ from s by one byte's case, one
// byte, a byte more or a byte less.
func nearMisses(s string) []string {
	out := []string{s + "0", "0" + s}
	if s != "" {
		out = append(out, s[1:], s[:len(s)-1])
	}
	for k := range len(s) {
		b := []byte(s)
		switch c := b[k]; {
		case 'a' <= c && c <= 'z':
			b[k] = c - 'a' + 'A'
		case 'A' <= c && c <= 'Z':
			b[k] = c - 'A' + 'a'
		case c == '-':
			b[k] = '0'
		default:
			b[k] = c ^ 1
		}
		out = append(out, string(b))
	}
	return out
}

// FuzzForms: any string, and any bytes as hex or as a UUID in either case,
// comes back exactly from its form, which is never longer than the
// string, and equals only itself.
func FuzzForms(f *testing.F) {
	f.Add("", []byte{}, "x")
	f.Add("k", []byte{0xde, 0xad}, "K")
	f.Add("a-b", []byte("0123456789abcdef"), "")
	f.Fuzz(func(t *testing.T, s string, raw []byte, other string) {
		in := []string{s, hex.EncodeToString(raw), strings.ToUpper(hex.EncodeToString(raw))}
		if len(raw) >= 16 {
			u := hex.EncodeToString(raw[:16])
			u = u[:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:]
			in = append(in, u, strings.ToUpper(u))
		}
		for _, s := range in {
			b, f := appendCompact(nil, s)
			p := string(b)
			if len(p) > len(s) || (f == formRaw) != (p == s) {
				t.Fatalf("%q: stored as %q, form %d", s, p, f)
			}
			if got := string(appendText(nil, p, f)); got != s || textLen(p, f) != len(s) {
				t.Fatalf("%q (form %d) came back as %q", s, f, got)
			}
			if !equalText(p, f, s) || equalText(p, f, other) != (other == s) {
				t.Fatalf("%q (form %d): equalText wrong (other %q)", s, f, other)
			}
			for _, miss := range nearMisses(s) {
				if equalText(p, f, miss) {
					t.Fatalf("%q (form %d) equals %q", s, f, miss)
				}
			}
		}
	})
}
