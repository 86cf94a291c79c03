package canonicaljson

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
)

// TestLongExponents checks the canonical form of numbers whose
// exponents have a million digits, including carries and borrows through
// every digit: exponent arithmetic through math/big, whose decimal
// conversion is quadratic, would take seconds for each;
// BenchmarkAppendScaling shows the cost per byte stays flat.
func TestLongExponents(t *testing.T) {
	t.Parallel()
	const n = 1 << 20
	nines, zeros := strings.Repeat("9", n), strings.Repeat("0", n)
	tests := map[string]struct{ in, want string }{
		"plain":              {`{"a":1e` + nines + `}`, `{"a":1e` + nines + `}`},
		"carry through all":  {`123e` + nines, `1.23e1` + zeros[1:] + `1`},
		"negative, carry":    {`-0.001e-` + nines, `-1e-1` + zeros[1:] + `2`},
		"borrow through all": {`0.0001e1` + zeros, `1e` + strings.Repeat("9", n-1) + `6`},
		"negative, borrow":   {`12345e-1` + zeros, `1.2345e-` + strings.Repeat("9", n-1) + `6`},
		"leading zeros":      {`1e` + zeros + `1` + zeros, `1e1` + zeros},
		"long mantissa":      {`1.` + nines + `e-1` + zeros, `1.` + nines + `e-1` + zeros},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := canonical([]byte(tt.in), nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("canonical(%.40q...)\n got %.60q... (%d bytes)\nwant %.60q... (%d bytes)", tt.in, got, len(got), tt.want, len(tt.want))
			}
		})
	}
}

// TestExponentArithmetic compares the decimal exponent
// arithmetic with math/big on random numbers with long exponents.
func TestExponentArithmetic(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	digits := func(n int, first byte) string {
		b := []byte{first}
		for range n - 1 {
			b = append(b, byte('0'+r.IntN(10)))
		}
		return string(b)
	}
	for range 2000 {
		// Mostly 9s and 0s, so carries and borrows run far.
		var exp string
		switch r.IntN(3) {
		case 0:
			exp = "1" + strings.Repeat("0", 18+r.IntN(30)) + digits(1+r.IntN(3), '0')
		case 1:
			exp = strings.Repeat("9", 19+r.IntN(30)) + digits(1+r.IntN(3), '9')
		default:
			exp = digits(19+r.IntN(40), byte('1'+r.IntN(9)))
		}
		intPart := digits(1+r.IntN(12), byte('1'+r.IntN(9)))
		frac := digits(r.IntN(12), '0')
		sign, expSign := []string{"", "-"}[r.IntN(2)], []string{"", "+", "-"}[r.IntN(3)]
		num := sign + intPart
		if frac != "" {
			num += "." + frac + "1" // no trailing zero in the fraction
		}
		in := num + "e" + expSign + exp

		// Expected: mantissa digits D (no leading/trailing zeros) and the
		// exponent of the form d.ddd, by math/big.
		all := strings.TrimLeft(intPart+frac, "0")
		if frac != "" {
			all += "1"
		}
		fracLen := len(frac)
		if frac != "" {
			fracLen++
		}
		trimmed := strings.TrimRight(all, "0")
		e, _ := new(big.Int).SetString(exp, 10)
		if expSign == "-" {
			e.Neg(e)
		}
		e.Add(e, big.NewInt(int64(len(all)-len(trimmed))-int64(fracLen)+int64(len(trimmed))-1))
		want := sign + trimmed[:1]
		if len(trimmed) > 1 {
			want += "." + trimmed[1:]
		}
		want += "e" + e.String()

		got, err := canonical([]byte(in), nil)
		if err != nil || string(got) != want {
			t.Fatalf("canonical(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
}

// countingContext is a context that never reports Done by closing its
// channel but whose Err reports context.Canceled from call after+1 on, and
// counts the calls: it shows how often work checks its context and that it
// stops at the first check that sees the end.
type countingContext struct {
	context.Context
	done  chan struct{}
	after int64
	calls atomic.Int64
}

func newCountingContext(after int64) *countingContext {
	return &countingContext{Context: context.Background(), done: make(chan struct{}), after: after}
}

func (c *countingContext) Done() <-chan struct{} { return c.done }

func (c *countingContext) Err() error {
	if c.calls.Add(1) > c.after {
		return context.Canceled
	}
	return nil
}

// TestAppendStopsWhenContextEnds: canonicalising a large document checks
// the context about every pollEvery bytes of input, whatever its shape,
// and stops at the first check that finds it ended, returning its error.
func TestAppendStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	for _, kind := range scalingKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			doc := scalingBody(kind, size)
			ctx := newCountingContext(math.MaxInt64)
			if _, err := Append(ctx, nil, doc, nil); err != nil {
				t.Fatal(err)
			}
			checks := ctx.calls.Load()
			if min := int64(len(doc)/pollEvery - 1); checks < min {
				t.Fatalf("checked the context %d times for %d bytes; want at least %d", checks, len(doc), min)
			}
			for _, after := range []int64{0, checks / 2, checks - 1} {
				ctx := newCountingContext(after)
				out, err := Append(ctx, nil, doc, nil)
				if !errors.Is(err, context.Canceled) || out != nil || ctx.calls.Load() != after+1 {
					t.Fatalf("context ended after %d of %d checks: %d bytes, %v, %d checks; want context.Canceled at check %d",
						after, checks, len(out), err, ctx.calls.Load(), after+1)
				}
			}
		})
	}
}

// TestFoldEqualMatchesEncodingJSON checks foldEqual against bytes.EqualFold
// (the rule encoding/json documents for matching names to fields), that
// names which fold alike hash alike, and that foldCompare orders them
// consistently.
func TestFoldEqualMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	names := []string{"", "a", "A", "b", "amount", "Amount", "AMOUNT", "amounts", "k", "K", "\u212a", "s", "S", "ſ",
		"ß", "ẞ", "ss", "SS", "é", "É", "e", "µ", "μ", "Μ", "ǅ", "ǆ", "Ǆ", "σ", "ς", "Σ", "key_1", "KEY_1", "Key-1", "ﬃ", "\ufffd", "😀"}
	for _, a := range names {
		for _, b := range names {
			want := bytes.EqualFold([]byte(a), []byte(b))
			if got := foldEqual([]byte(a), []byte(b)); got != want {
				t.Errorf("foldEqual(%q, %q) = %v, bytes.EqualFold says %v", a, b, got, want)
			}
			if want && foldHash([]byte(a)) != foldHash([]byte(b)) {
				t.Errorf("%q and %q fold alike but hash differently", a, b)
			}
			if c, d := foldCompare([]byte(a), []byte(b)), foldCompare([]byte(b), []byte(a)); c != -d || (c == 0) != want {
				t.Errorf("foldCompare(%q, %q) = %d, reversed %d; equal under folding: %v", a, b, c, d, want)
			}
		}
	}
	// A lone surrogate (kept as WTF-8) reads as U+FFFD, as encoding/json
	// decodes it.
	lone := appendRune3(nil, 0xD800)
	if !foldEqual(lone, []byte("\ufffd")) || foldHash(lone) != foldHash([]byte("\ufffd")) {
		t.Errorf("a lone surrogate does not fold to U+FFFD")
	}
}

// smallBodies are small request bodies of the shapes clients send:
// bench/peers' order, flat objects with more members and whitespace, a
// nested object, a float, an escape.
var smallBodies = []struct{ name, body string }{
	{"order-21B", `{"sku":"abc","qty":1}`},
	{"flat-8", `{"customer": "cus_9s6XKzkNRiz8i3", "amount": 1999, "currency": "eur", "confirm": true, "description": "Order #4711", "receipt_email": "jenny.rosen@example.com", "coupon": null, "quantity": 3}`},
	{"flat-sorted-3", `{"a":"x","b":2,"c":false}`},
	{"nested", `{"sku":"abc","qty":1,"meta":{"source":"web","ts":17}}`},
	{"float", `{"sku":"abc","qty":1,"price":9.99}`},
	{"escape", `{"sku":"a\"bc","qty":1}`},
}

// BenchmarkAppendSmall canonicalises small bodies into a reused buffer, as
// the fingerprint does.
func BenchmarkAppendSmall(b *testing.B) {
	for _, bb := range smallBodies {
		b.Run(bb.name, func(b *testing.B) {
			body := []byte(bb.body)
			var dst []byte
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var err error
				dst, err = Append(context.Background(), dst[:0], body, nil)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
