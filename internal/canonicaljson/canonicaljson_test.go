package canonicaljson

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// canonical is Append to a new slice, without a context.
func canonical(doc []byte, ignore []string) ([]byte, error) {
	return Append(context.Background(), nil, doc, ignore)
}

func TestAppend(t *testing.T) {
	t.Parallel()
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := map[string]struct {
		in      string
		ignore  []string
		want    string
		wantErr string // substring of the error; "" means success
	}{
		// Structure and whitespace.
		"key order":             {in: `{"b":1,"a":2,"c":3}`, want: `{"a":2,"b":1,"c":3}`},
		"nested key order":      {in: `{"z":{"y":1,"x":[{"b":1,"a":2}]},"a":null}`, want: `{"a":null,"z":{"x":[{"a":2,"b":1}],"y":1}}`},
		"keys bytewise":         {in: `{"a":1,"B":2,"é":3,"aa":4,"":5}`, want: `{"":5,"B":2,"a":1,"aa":4,"é":3}`},
		"keys by decoded":       {in: `{"\u0062":1,"a":2}`, want: `{"a":2,"b":1}`},
		"whitespace":            {in: " \t\r\n{ \"a\" :\n[ 1 , 2 ] , \"b\" : { } }\n ", want: `{"a":[1,2],"b":{}}`},
		"array order kept":      {in: `[3,1,2]`, want: `[3,1,2]`},
		"empty containers":      {in: `[{},[],""]`, want: `[{},[],""]`},
		"literals":              {in: `[true,false,null]`, want: `[true,false,null]`},
		"scalar document":       {in: ` "x" `, want: `"x"`},
		"number document":       {in: `1.50`, want: `1.5`},
		"depth 1000":            {in: deep(1000), want: deep(1000)},
		"depth 1001":            {in: deep(1001), wantErr: "nested deeper than 1000"},
		"deep objects 1001":     {in: strings.Repeat(`{"a":`, 1001) + "1" + strings.Repeat("}", 1001), wantErr: "nested deeper than 1000"},
		"duplicate keys":        {in: `{"a":1,"a":2}`, wantErr: "duplicate object key"},
		"duplicate unsorted":    {in: `{"b":1,"a":1,"b":2}`, wantErr: `duplicate object key "b"`},
		"duplicate escaped":     {in: `{"a":1,"\u0061":1}`, wantErr: "duplicate object key"},
		"duplicate nested":      {in: `[{"x":{"k":1,"k":1}}]`, wantErr: "duplicate object key"},
		"same key other objs":   {in: `[{"a":1},{"a":1}]`, want: `[{"a":1},{"a":1}]`},
		"folded names":          {in: `{"amount":1,"Amount":1000}`, wantErr: `"Amount" and "amount" differ only in letter case`},
		"folded reversed":       {in: `{"Amount":1000,"amount":1}`, wantErr: `"Amount" and "amount" differ only in letter case`},
		"folded mixed":          {in: `{"a":1,"userId":2,"b":3,"USERID":4}`, wantErr: "differ only in letter case"},
		"folded kelvin sign":    {in: `{"k":1,"\u212a":2}`, wantErr: "differ only in letter case"},
		"folded long s":         {in: `{"ſ":1,"S":2}`, wantErr: "differ only in letter case"},
		"folded non-ASCII":      {in: `{"é":1,"É":2}`, wantErr: "differ only in letter case"},
		"folded surrogate":      {in: `{"\ud800":1,"\ufffd":2}`, wantErr: "differ only in letter case"},
		"two surrogates":        {in: `{"\ud800":1,"\udc00":2}`, wantErr: "differ only in letter case"},
		"folded nested":         {in: `[{"x":{"Ab":1,"aB":2}}]`, wantErr: "differ only in letter case"},
		"folded large object":   {in: manyMembers(40, `"Key7":0`), wantErr: `"Key7" and "key7" differ only in letter case`},
		"large object":          {in: manyMembers(40, `"Key":0`), want: canonicalManyMembers(40, `"Key":0`)},
		"sharp s is not ss":     {in: `{"ß":1,"ss":2,"SS":3}`, wantErr: `"SS" and "ss" differ`},
		"sharp s and ss":        {in: `{"ß":1,"ss":2}`, want: `{"ss":2,"ß":1}`},
		"case alike other objs": {in: `[{"a":1},{"A":1}]`, want: `[{"a":1},{"A":1}]`},

		// Strings.
		"escape vs literal":   {in: `["\u00e9","é","\u00E9"]`, want: `["é","é","é"]`},
		"short escapes":       {in: `"\"\\\/\b\f\n\r\t"`, want: `"\"\\/\b\f\n\r\t"`},
		"control escapes":     {in: `"\u0000\u001F\u0008"`, want: `"\u0000\u001f\b"`},
		"unneeded escapes":    {in: `"\u0041\u002f\u007f"`, want: "\"A/\x7f\""},
		"surrogate pair":      {in: `"\ud83d\ude00"`, want: `"😀"`},
		"surrogate literal":   {in: `"😀"`, want: `"😀"`},
		"lone high surrogate": {in: `"\uD800x"`, want: `"\ud800x"`},
		"lone low surrogate":  {in: `"\udc00"`, want: `"\udc00"`},
		"reversed surrogates": {in: `"\udc00\ud800"`, want: `"\udc00\ud800"`},
		"high then non-low":   {in: `"\ud800\u0041"`, want: `"\ud800A"`},
		"line separators":     {in: `"\u2028\u2029"`, want: "\"\u2028\u2029\""},
		"escaped key":         {in: `{"a\"b":1}`, want: `{"a\"b":1}`},
		"raw control char":    {in: "\"a\x01\"", wantErr: "control character"},
		"raw newline":         {in: "\"a\n\"", wantErr: "control character"},
		"bad escape":          {in: `"\x"`, wantErr: `invalid escape "\\x"`},
		"short unicode":       {in: `"\u12"`, wantErr: `invalid \u escape`},
		"bad unicode":         {in: `"\u12g4"`, wantErr: `invalid \u escape`},
		"invalid UTF-8":       {in: "\"a\xffb\"", wantErr: "invalid UTF-8"},
		"encoded surrogate":   {in: "\"\xed\xa0\x80\"", wantErr: "invalid UTF-8"},
		"overlong UTF-8":      {in: "\"\xc0\xaf\"", wantErr: "invalid UTF-8"},
		"unterminated string": {in: `"abc`, wantErr: "end of input in string"},

		// Numbers.
		"integers":            {in: `[0,1,-1,10,100,123456789]`, want: `[0,1,-1,10,100,123456789]`},
		"one spellings":       {in: `[1,1.0,1e0,10e-1,0.1e1,1E+0,100e-2,1.000]`, want: `[1,1,1,1,1,1,1,1]`},
		"negative zero":       {in: `[-0,0.0,-0.0,0e5,-0e-5]`, want: `[0,0,0,0,0]`},
		"big integers differ": {in: `[12345678901234567890,12345678901234567891]`, want: `[12345678901234567890,12345678901234567891]`},
		"huge integer":        {in: `123456789012345678901234567890123456789`, want: `123456789012345678901234567890123456789`},
		"exact decimal":       {in: `[0.1,0.10000000000000000000001,1.5,-2.25]`, want: `[0.1,0.10000000000000000000001,1.5,-2.25]`},
		"trailing zeros":      {in: `[1.50,2.000,0.0100]`, want: `[1.5,2,0.01]`},
		"small fractions":     {in: `[0.000001,1e-6,1e-7,0.00000012]`, want: `[0.000001,0.000001,1e-7,1.2e-7]`},
		"exponents":           {in: `[1e2,1.5e3,12e-1,1e21,1e22,1.5e30,-1E+100]`, want: `[100,1500,1.2,1000000000000000000000,1e22,1.5e30,-1e100]`},
		"many zeros":          {in: `[1000000000000000000000,10000000000000000000000]`, want: `[1000000000000000000000,1e22]`},
		"huge exponent":       {in: `[1e99999999999999999999999,1e99999999999999999999998,-25e-99999999999999999999999]`, want: `[1e99999999999999999999999,1e99999999999999999999998,-2.5e-99999999999999999999998]`},
		"huge zero exponent":  {in: `0e99999999999999999999999`, want: `0`},
		"exponent leading 0s": {in: `[1e0002,1e-0000000000000000000000000000002]`, want: `[100,0.01]`},
		"fraction point":      {in: `[123.456e1,123.456e-5,123.456e3]`, want: `[1234.56,0.00123456,123456]`},
		"leading zero":        {in: `01`, wantErr: "after the JSON value"},
		"plus sign":           {in: `+1`, wantErr: "invalid character '+'"},
		"bare point":          {in: `.5`, wantErr: "invalid character '.'"},
		"no fraction digits":  {in: `1.`, wantErr: "digit after '.'"},
		"no exponent digits":  {in: `1e+`, wantErr: "digit in the exponent"},
		"minus only":          {in: `-`, wantErr: "expecting a digit"},
		"NaN":                 {in: `NaN`, wantErr: "invalid character 'N'"},
		"Infinity":            {in: `-Infinity`, wantErr: "expecting a digit"},
		"hex":                 {in: `0x10`, wantErr: "after the JSON value"},

		// Ignore pointers.
		"ignore top member":      {in: `{"a":1,"b":2}`, ignore: []string{"/a"}, want: `{"b":2}`},
		"ignore nested":          {in: `{"meta":{"requestedAt":"now","id":7},"amount":5}`, ignore: []string{"/meta/requestedAt"}, want: `{"amount":5,"meta":{"id":7}}`},
		"ignore array index":     {in: `{"items":[{"note":"x","n":1},{"note":"y","n":2}]}`, ignore: []string{"/items/0/note"}, want: `{"items":[{"n":1},{"n":2,"note":"y"}]}`},
		"ignore array element":   {in: `{"a":[1,2,3]}`, ignore: []string{"/a/1"}, want: `{"a":[1,3]}`},
		"ignore two elements":    {in: `{"a":[1,2,3]}`, ignore: []string{"/a/0", "/a/1"}, want: `{"a":[3]}`},
		"ignore last only":       {in: `[1,2]`, ignore: []string{"/1"}, want: `[1]`},
		"ignore all members":     {in: `{"a":1,"b":2}`, ignore: []string{"/b", "/a"}, want: `{}`},
		"ignore matches nothing": {in: `{"a":{"b":1}}`, ignore: []string{"/x", "/a/c", "/a/b/c", "/a/b/0"}, want: `{"a":{"b":1}}`},
		"ignore bad index":       {in: `[1,2]`, ignore: []string{"/01", "/-", "/2", "/a", "/-1", "/99999999999"}, want: `[1,2]`},
		"ignore index on object": {in: `{"0":1,"1":2}`, ignore: []string{"/0"}, want: `{"1":2}`},
		"ignore escaped tokens":  {in: `{"a/b":1,"m~n":2,"c":3}`, ignore: []string{"/a~1b", "/m~0n"}, want: `{"c":3}`},
		"ignore empty key":       {in: `{"":1,"a":2}`, ignore: []string{"/"}, want: `{"a":2}`},
		"ignore decoded key":     {in: `{"\u00e9":1,"a":2}`, ignore: []string{"/é"}, want: `{"a":2}`},
		"ignore parent and kid":  {in: `{"a":{"b":1},"c":1}`, ignore: []string{"/a/b", "/a"}, want: `{"c":1}`},
		"ignore root pointer":    {in: `{"a":1}`, ignore: []string{""}, want: `{"a":1}`},
		"ignore scalar doc":      {in: `5`, ignore: []string{"/a"}, want: `5`},
		"ignore invalid pointer": {in: `{"a":1}`, ignore: []string{"a"}, wantErr: "invalid JSON pointer"},
		"ignore bad tilde":       {in: `{"a":1}`, ignore: []string{"/a~2"}, wantErr: "invalid JSON pointer"},

		// Invalid documents.
		"empty":             {in: ``, wantErr: "unexpected end of input"},
		"only whitespace":   {in: "  \n", wantErr: "unexpected end of input"},
		"trailing garbage":  {in: `{"a":1}x`, wantErr: "after the JSON value"},
		"two values":        {in: `1 2`, wantErr: "after the JSON value"},
		"trailing comma":    {in: `[1,]`, wantErr: "invalid character ']'"},
		"object trailing ,": {in: `{"a":1,}`, wantErr: "expecting a member name"},
		"missing colon":     {in: `{"a" 1}`, wantErr: "expecting ':'"},
		"unquoted key":      {in: `{a:1}`, wantErr: "expecting a member name"},
		"single quotes":     {in: `{'a':1}`, wantErr: "expecting a member name"},
		"unclosed array":    {in: `[1,2`, wantErr: "end of input in array"},
		"unclosed object":   {in: `{"a":1`, wantErr: "end of input in object"},
		"missing comma":     {in: `[1 2]`, wantErr: "expecting ',' or ']'"},
		"bad literal":       {in: `tru`, wantErr: "expecting true"},
		"capital literal":   {in: `True`, wantErr: "invalid character 'T'"},
		"BOM":               {in: "\ufeff{}", wantErr: "invalid character 0xEF"},
		"comment":           {in: `{} // x`, wantErr: "after the JSON value"},
		"NUL":               {in: "\x00", wantErr: "invalid character 0x00"},
		"vertical tab":      {in: "\v1", wantErr: "invalid character 0x0B"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := canonical([]byte(tt.in), tt.ignore)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Append(%q) = %s; want error containing %q", tt.in, got, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Append(%q) error %q; want it to contain %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Append(%q): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Fatalf("Append(%q)\n got %s\nwant %s", tt.in, got, tt.want)
			}
			if !json.Valid(got) {
				t.Fatalf("Append(%q) = %s: not valid JSON", tt.in, got)
			}
			again, err := canonical(got, nil)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("canonicalising %s again = %s, %v", got, again, err)
			}
		})
	}
}

// manyMembers returns an object of n members "key0".."key<n-1>" and extra.
func manyMembers(n int, extra string) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		fmt.Fprintf(&b, `"key%d":%d,`, i, i)
	}
	return b.String() + extra + "}"
}

// canonicalManyMembers is the canonical form of manyMembers(n, extra) when
// extra's name sorts before "key".
func canonicalManyMembers(n int, extra string) string {
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf(`"key%d":%d`, i, i)
	}
	slices.Sort(names)
	return "{" + extra + "," + strings.Join(names, ",") + "}"
}

func TestDuplicateKeyError(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{`{"a":1,"a":1}`, `{"a":1,"A":1}`, manyMembers(30, `"KEY1":1`)} {
		_, err := canonical([]byte(doc), nil)
		if !errors.Is(err, ErrDuplicateKey) {
			t.Fatalf("Append(%s): error %v does not wrap ErrDuplicateKey", doc, err)
		}
	}
}

// TestNumbersMatchFloat checks that numbers that are equal as
// canonical decimals are equal when decoded as floats too (the converse does
// not hold: floats round).
func TestNumbersMatchFloat(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"integer":  `[1, 1.0, 1e0, 10e-1, 0.1e+1]`,
		"fraction": `[0.5, 5e-1, 50E-2, 0.50]`,
		"large":    `[1e22, 10e21, 10000000000000000000000]`,
		"small":    `[1.5e-7, 15e-8, 0.00000015]`,
		"negative": `[-3.25, -325e-2, -0.325e1]`,
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := canonical([]byte(in), nil)
			if err != nil {
				t.Fatal(err)
			}
			var raw, canon []float64
			if err := json.Unmarshal([]byte(in), &raw); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(got, &canon); err != nil {
				t.Fatal(err)
			}
			for i := range raw {
				if raw[i] != canon[i] || canon[i] != canon[0] {
					t.Fatalf("%s: element %d: %v vs canonical %v (first %v); canonical %s", in, i, raw[i], canon[i], canon[0], got)
				}
			}
		})
	}
}

func TestValidatePointer(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in string
		ok bool
	}{
		"empty":         {"", true},
		"root slash":    {"/", true},
		"simple":        {"/a", true},
		"nested":        {"/meta/requestedAt", true},
		"array index":   {"/items/0/note", true},
		"escapes":       {"/a~0b/c~1d", true},
		"empty tokens":  {"//", true},
		"unicode":       {"/é", true},
		"no slash":      {"a/b", false},
		"bare tilde":    {"/a~", false},
		"tilde 2":       {"/a~2", false},
		"tilde slash":   {"/~/", false},
		"invalid UTF-8": {"/\xff", false},
		"hash fragment": {"#/a", false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := ValidatePointer(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidatePointer(%q) = %v; want ok=%v", tt.in, err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "invalid JSON pointer") {
				t.Fatalf("ValidatePointer(%q) error %q is not descriptive", tt.in, err)
			}
		})
	}
}

// canonicalSeeds seed the canonical JSON fuzzers.
var canonicalSeeds = []string{
	`{"b":1,"a":[1,2,{"d":null,"c":true}]}`,
	`[1,1.0,1e0,10e-1,-0,12345678901234567890,1e999999999999999999999]`,
	`"\u00e9\ud83d\ude00\ud800\"\\\/\b\f\n\r\t\u0001"`,
	`{"a":1,"a":2}`,
	`  {"items":[{"note":"x","n":0.000001}]} `,
	`[[[[[]]]]]`,
	`{"a":}`,
	"\"\xff\"",
	`0.1e-7`,
	`{"amount":1,"Amount":1000}`,
	`{"x":{"k":1,"\u212a":2},"l":[{"s":1,"ſ":2}]}`,
	`{"\ud800":1,"\ufffd":2}`,
	`-0`,
	`[-0.0,{"a":-0e3},-0.000]`,
}

func FuzzAppend(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s), "/items/0/note")
		f.Add([]byte(s), "") // the properties that hold without ignored members
	}
	f.Fuzz(func(t *testing.T, doc []byte, ptr string) {
		var ignore []string
		if ptr != "" {
			ignore = []string{ptr}
		}
		got, err := canonical(doc, ignore)
		if err != nil {
			if got != nil {
				t.Fatalf("Append returned output %q with error %v", got, err)
			}
			if json.Valid(doc) && utf8.Valid(doc) && ValidatePointer(ptr) == nil &&
				!errors.Is(err, ErrDuplicateKey) && !strings.Contains(err.Error(), "nested deeper") {
				t.Fatalf("Append(%q) rejected valid JSON: %v", doc, err)
			}
			return
		}
		if !json.Valid(doc) {
			t.Fatalf("Append(%q) accepted invalid JSON: %s", doc, got)
		}
		if !json.Valid(got) || !utf8.Valid(got) {
			t.Fatalf("Append(%q) = %q: not valid UTF-8 JSON", doc, got)
		}
		again, err := canonical(got, nil)
		if err != nil || !bytes.Equal(again, got) {
			t.Fatalf("Append not idempotent: %q -> %q -> %q, %v", doc, got, again, err)
		}
		// Whitespace never matters.
		var indented bytes.Buffer
		if err := json.Indent(&indented, doc, "\t", " "); err != nil {
			t.Fatalf("json.Indent(%q): %v", doc, err)
		}
		if again, err := canonical(indented.Bytes(), ignore); err != nil || !bytes.Equal(again, got) {
			t.Fatalf("indenting %q changes the canonical form: %q vs %q, %v", doc, got, again, err)
		}
		if len(ignore) == 0 {
			// Canonical JSON decodes to the same values as the input.
			var a, b any
			if json.Unmarshal(doc, &a) == nil {
				if err := json.Unmarshal(got, &b); err != nil {
					t.Fatalf("decoding canonical %q: %v", got, err)
				}
				// Numbers compare as float64 values with ==, so -0 equals 0
				// (the canonical form writes both as 0, as RFC 8785 does).
				if !reflect.DeepEqual(a, b) {
					ja, _ := json.Marshal(a)
					jb, _ := json.Marshal(b)
					t.Fatalf("Append(%q) = %q changes the value: %s vs %s", doc, got, ja, jb)
				}
			}
			checkMemberOrderIrrelevant(t, doc, got)
		}
	})
}

// decodeFolded decodes doc as a case-insensitive decoder sees it: objects
// become maps keyed by the case-folded member name (each rune replaced by
// the smallest rune of its simple folding orbit, as encoding/json matches
// names to struct fields), the last member of a name winning; strings are
// decoded by encoding/json (a lone surrogate becomes U+FFFD).
func decodeFolded(doc []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	v, err := decodeFoldedValue(dec)
	if err == nil && dec.More() {
		err = errors.New("trailing data")
	}
	return v, err
}

func decodeFoldedValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		m := map[string]any{}
		for dec.More() {
			name, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeFoldedValue(dec)
			if err != nil {
				return nil, err
			}
			var key []rune
			for _, r := range name.(string) {
				low := r
				for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
					low = min(low, f)
				}
				key = append(key, low)
			}
			m[string(key)] = v
		}
		_, err := dec.Token()
		return m, err
	case json.Delim('['):
		a := []any{}
		for dec.More() {
			v, err := decodeFoldedValue(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return tok, nil
}

// checkMemberOrderIrrelevant checks the property that makes member order
// safe to ignore: every document with the canonical form canon decodes to
// the same value, whatever the order of its members, both into maps (where
// encoding/json reads a lone surrogate as U+FFFD) and as a case-insensitive
// decoder sees it (decodeFolded; encoding/json matches names to struct
// fields so, the last match winning). It writes doc's
// members in ascending and in descending name order; the two must
// canonicalise to canon and decode like doc.
func checkMemberOrderIrrelevant(t *testing.T, doc, canon []byte) {
	t.Helper()
	p := new(parser)
	p.reset(doc)
	root, err := p.parseDocument()
	if err != nil {
		t.Fatalf("parsing %q again: %v", doc, err)
	}
	decode := func(b []byte) (m, folded any, errs [2]bool) {
		errs[0] = json.Unmarshal(b, &m) != nil
		folded, err := decodeFolded(b)
		errs[1] = err != nil
		return m, folded, errs
	}
	m0, s0, e0 := decode(doc)
	for _, descending := range []bool{false, true} {
		b := emitOrdered(p, nil, root, descending)
		if c, err := canonical(b, nil); err != nil || !bytes.Equal(c, canon) {
			t.Fatalf("%q reordered as %q canonicalises to %q, %v; want %q", doc, b, c, err, canon)
		}
		m, s, e := decode(b)
		if e != e0 || !reflect.DeepEqual(m, m0) || !reflect.DeepEqual(s, s0) {
			t.Fatalf("%q and %q share the canonical form %q but decode differently:\n%#v %+v %v\n%#v %+v %v", doc, b, canon, m0, s0, e0, m, s, e)
		}
	}
}

// emitOrdered is emit with object members in ascending or descending name
// order.
func emitOrdered(p *parser, b []byte, n int32, descending bool) []byte {
	node := &p.nodes[n]
	if node.kind == kindScalar {
		return append(b, p.text(node.val)...)
	}
	kids := slices.Clone(p.kids[node.kids : node.kids+node.nkid])
	open, close := byte('['), byte(']')
	if node.kind == kindObject {
		open, close = '{', '}'
		if descending {
			slices.Reverse(kids)
		}
	}
	b = append(b, open)
	for i, k := range kids {
		if i > 0 {
			b = append(b, ',')
		}
		if node.kind == kindObject {
			b = appendQuoted(b, p.text(p.nodes[k].key))
			b = append(b, ':')
		}
		b = emitOrdered(p, b, k, descending)
	}
	return append(b, close)
}
