package retrysafe

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// canonicalBothWays canonicalises doc with appendCanonical (the flat fast
// path first) and with appendCanonicalTree alone, after a prefix in dst,
// and fails unless both give the same bytes, or the same error. It
// reports whether the fast path took doc.
func canonicalBothWays(t *testing.T, doc []byte, ignore []string) (flat bool) {
	t.Helper()
	prefix := []byte("prefix")
	got, err := new(canonParser).appendCanonical(context.Background(), prefix[:len(prefix):len(prefix)], doc, ignore)
	want, wantErr := new(canonParser).appendCanonicalTree(context.Background(), prefix[:len(prefix):len(prefix)], doc, ignore)
	if !bytes.Equal(got, want) || (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
		t.Fatalf("canonicalising %q (ignore %q):\nwith the fast path %q, %v\ntree only          %q, %v", doc, ignore, got, err, want, wantErr)
	}
	_, flat = new(canonParser).parseFlat(doc)
	return flat
}

// TestCanonicalFlat checks that the flat fast path takes the documents it
// is meant for, leaves the others to the tree, and agrees with the tree on
// all of them.
func TestCanonicalFlat(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in     string
		ignore []string
		flat   bool // the fast path takes it
	}{
		"order":               {in: `{"sku":"abc","qty":1}`, flat: true},
		"empty":               {in: `{}`, flat: true},
		"empty spaced":        {in: " { \n } ", flat: true},
		"whitespace":          {in: " \t{ \"b\" :\r\n true ,\"a\":false\t}\n", flat: true},
		"literals":            {in: `{"t":true,"f":false,"n":null}`, flat: true},
		"integers":            {in: `{"a":0,"b":-1,"c":10,"d":1000000000000000000000,"e":12345678901234567890123}`, flat: true},
		"non-ASCII value":     {in: "{\"name\":\"Zoë 😀\",\"x\":\"\x7f\"}", flat: true},
		"DEL in name":         {in: "{\"a\x7f\":1}", flat: true},
		"long names":          {in: `{"customer_reference":"x","customer_ref":"y","customer_referencf":"z","customer":"w"}`, flat: true},
		"equal prefixes":      {in: `{"abcdefghij":1,"abcdefghi":2,"abcdefgh":3,"abcdefg":4}`, flat: true},
		"empty name":          {in: `{"":1,"a":2}`, flat: true},
		"sixteen members":     {in: flatMembers(16), flat: true},
		"ignore member":       {in: `{"sku":"abc","qty":1}`, ignore: []string{"/qty"}, flat: true},
		"ignore all":          {in: `{"a":1,"b":2}`, ignore: []string{"/b", "/a", "/a"}, flat: true},
		"ignore escaped":      {in: `{"a/b":1,"m~n":2,"c":3}`, ignore: []string{"/a~1b", "/m~0n"}, flat: true},
		"ignore deeper":       {in: `{"a":1,"b":2}`, ignore: []string{"/a/0", "/b/c", "", "/x"}, flat: true},
		"ignore two tokens":   {in: `{"a/b":1,"a":2}`, ignore: []string{"/a/b"}, flat: true},
		"ignore empty name":   {in: `{"":1,"a":2}`, ignore: []string{"/"}, flat: true},
		"ignore invalid":      {in: `{"a":1}`, ignore: []string{"/a", "a"}, flat: true},
		"ignore bad tilde":    {in: `{"a":1}`, ignore: []string{"/a~2"}, flat: true},
		"seventeen members":   {in: flatMembers(17)},
		"duplicate":           {in: `{"a":1,"a":2}`},
		"duplicate long":      {in: `{"abcdefghij":1,"abcdefghij":2}`},
		"folded":              {in: `{"qty":1,"QTY":2}`},
		"folded long":         {in: `{"customer_reference":1,"customer_Reference":2}`},
		"not folded":          {in: `{"a@":1,"a` + "`" + `":2,"[":3,"{":4}`, flat: true},
		"kelvin sign":         {in: `{"k":1,"\u212a":2}`},
		"kelvin sign raw":     {in: `{"k":1,"K":2}`},
		"non-ASCII name":      {in: `{"é":1}`},
		"escaped name":        {in: `{"a\"b":1}`},
		"escaped value":       {in: `{"a":"\u00e9"}`, flat: true},
		"control in value":    {in: "{\"a\":\"\x01\"}"},
		"invalid UTF-8":       {in: "{\"a\":\"\xff\"}"},
		"encoded surrogate":   {in: "{\"a\":\"\xed\xa0\x80\"}"},
		"numbers":             {in: `{"a":-0.0,"b":0.0,"c":1.50,"d":1E+2,"e":-12e-9,"f":1e99999999999999999999999,"g":0e5}`, flat: true},
		"escapes":             {in: `{"a":"\"\\\/\b\f\n\r\t\u0001","b":"\ud83d\ude00\ud800","c":"x\u00e9y"}`, flat: true},
		"bad escape":          {in: `{"a":"\x"}`},
		"no fraction digits":  {in: `{"a":1.}`},
		"float":               {in: `{"a":1.0}`, flat: true},
		"exponent":            {in: `{"a":1e2}`, flat: true},
		"negative zero":       {in: `{"a":-0}`, flat: true},
		"many zeros":          {in: `{"a":10000000000000000000000}`, flat: true},
		"leading zero":        {in: `{"a":01}`},
		"minus only":          {in: `{"a":-}`},
		"nested object":       {in: `{"a":{}}`},
		"nested array":        {in: `{"a":[1]}`},
		"array document":      {in: `[1,2]`},
		"scalar document":     {in: `"x"`},
		"bad literal":         {in: `{"a":tru}`},
		"literal run-on":      {in: `{"a":truex}`},
		"trailing comma":      {in: `{"a":1,}`},
		"trailing data":       {in: `{"a":1}x`},
		"two objects":         {in: `{}{}`},
		"missing colon":       {in: `{"a" 1}`},
		"unclosed":            {in: `{"a":1`},
		"unclosed name":       {in: `{"a`},
		"unclosed value":      {in: `{"a":"x`},
		"empty document":      {in: ``},
		"missing value":       {in: `{"a":}`},
		"value then garbage":  {in: `{"a":1 2}`},
		"vertical tab":        {in: "{\v}"},
		"unquoted name":       {in: `{a:1}`},
		"ignore on non-flat":  {in: `{"a":{"b":1}}`, ignore: []string{"/a/b"}},
		"invalid ptr on tree": {in: `{"a":[]}`, ignore: []string{"a"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if flat := canonicalBothWays(t, []byte(tt.in), tt.ignore); flat != tt.flat {
				t.Fatalf("fast path took %q: %v; want %v", tt.in, flat, tt.flat)
			}
		})
	}
	if big := `{"a":"` + strings.Repeat("x", maxFlatSize) + `"}`; canonicalBothWays(t, []byte(big), nil) {
		t.Fatalf("fast path took a document of %d bytes", len(big))
	}
	if maxFlatSize >= pollEvery {
		t.Fatalf("maxFlatSize %d must stay below pollEvery %d", maxFlatSize, pollEvery)
	}
}

// flatMembers returns a flat object of n members, in descending order.
func flatMembers(n int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := n - 1; i >= 0; i-- {
		fmt.Fprintf(&b, `"m%02d":%d`, i, i)
		if i > 0 {
			b.WriteString(",")
		}
	}
	return b.String() + "}"
}

// TestCanonicalFlatRandom compares the fast path with the tree on random
// flat objects whose names are drawn from a few that sort, repeat and
// fold into each other, with values of every kind the fast path takes and
// some it does not.
func TestCanonicalFlatRandom(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	names := []string{"", "a", "A", "b", "ab", "aB", "Ab", "abcdefgh", "abcdefgH", "abcdefghi", "abcdefgi", "ABCDEFGHI",
		"qty", "QTY", "sku", "a b", "a@", "a`", "z~", "a/b", "~1", "\u212a", "k", "é", `a\"b`}
	values := []string{"1", "0", "-1", "-0", "1.0", "1e2", "10", "1000000000000000000000", "10000000000000000000000",
		`"x"`, `""`, `"é"`, `"\n"`, `"a\u00e9"`, `"\ud800"`, `"\"\/"`, "true", "false", "null", "{}", "[]", `{"a":1}`,
		"-0.0e-5", "0.000001", "1e-7", "1.50", "1.", "-", "01", `"\x"`, "tru", "nul"}
	spaces := []string{"", "", "", " ", "\n\t"}
	sp := func() string { return spaces[r.IntN(len(spaces))] }
	flat := 0
	for range 20000 {
		var b strings.Builder
		b.WriteString(sp() + "{" + sp())
		n := r.IntN(maxFlatMembers + 2)
		for i := range n {
			if i > 0 {
				b.WriteString("," + sp())
			}
			b.WriteString(`"` + names[r.IntN(len(names))] + `"` + sp() + ":" + sp() + values[r.IntN(len(values))] + sp())
		}
		b.WriteString("}" + sp())
		var ignore []string
		for range r.IntN(3) {
			name := names[r.IntN(len(names))]
			if r.IntN(2) == 0 {
				name = strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
			}
			ignore = append(ignore, "/"+name)
		}
		if canonicalBothWays(t, []byte(b.String()), ignore) {
			flat++
		}
	}
	if flat < 2000 {
		t.Fatalf("the fast path took only %d of 20000 documents", flat)
	}
}

// TestPlainEnd compares plainEnd, eight bytes at a time, with a byte loop
// on every start of random strings over bytes on both sides of each edge.
func TestPlainEnd(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	alphabet := []byte{0x00, 0x01, 0x1F, 0x20, 0x21, '"', '\\', '[', ']', 'a', 'z', 0x7E, 0x7F, 0x80, 0xC3, 0xFF}
	for range 20000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			if r.IntN(4) == 0 {
				b[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				b[i] = 'a' + byte(r.IntN(26))
			}
		}
		for i := 0; i <= len(b); i++ {
			want := i
			for want < len(b) && plainASCII[b[want]] {
				want++
			}
			if got := plainEnd(b, i); got != want {
				t.Fatalf("plainEnd(%q, %d) = %d; want %d", b, i, got, want)
			}
		}
	}
	for c := range 256 {
		want := c >= 0x20 && c < 0x80 && c != '"' && c != '\\'
		if plainASCII[c] != want {
			t.Fatalf("plainASCII[%#x] = %v; want %v", c, plainASCII[c], want)
		}
	}
}

// FuzzCanonicalFlat compares appendCanonical (the flat fast path first)
// with appendCanonicalTree on arbitrary input: the same bytes, or the
// same error.
func FuzzCanonicalFlat(f *testing.F) {
	for _, s := range append(slices.Clone(canonicalSeeds),
		// Flat objects.
		`{"sku":"abc","qty":1}`,
		`{"a":1,"A":2}`,
		`{"k":1,"\u212a":2}`,
		`{"k":1,"K":2}`,
		`{"ab":1,"aB":2,"b":3}`,
		`{"abcdefghi":1,"abcdefghI":2}`,
		`{"a":1.0,"b":-0,"c":1e2,"d":-1,"e":10000000000000000000000}`,
		`{"a":"x\"y","b":"\u00e9","c":"\n","d":"é","e":"😀"}`,
		` { "b" : true , "a" : false , "c" : null } `,
		`{"":1,"a":2}`,
		`{}`,
		flatMembers(16),
		flatMembers(17),
	) {
		f.Add([]byte(s), "")
		f.Add([]byte(s), "/a")
	}
	f.Fuzz(func(t *testing.T, doc []byte, ptr string) {
		var ignore []string
		if ptr != "" {
			ignore = []string{ptr}
		}
		canonicalBothWays(t, doc, ignore)
	})
}
