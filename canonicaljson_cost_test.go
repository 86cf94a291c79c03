package retrysafe

import (
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestCanonicalJSONLongExponents checks the canonical form of numbers whose
// exponents have a million digits, including carries and borrows through
// every digit. The old code took seconds for each (math/big's decimal
// conversion is quadratic); BenchmarkFingerprintScaling shows the cost per
// byte now stays flat.
func TestCanonicalJSONLongExponents(t *testing.T) {
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
			got, err := CanonicalJSON([]byte(tt.in), nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("CanonicalJSON(%.40q...)\n got %.60q... (%d bytes)\nwant %.60q... (%d bytes)", tt.in, got, len(got), tt.want, len(tt.want))
			}
		})
	}
}

// TestCanonicalJSONExponentArithmetic compares the decimal exponent
// arithmetic with math/big on random numbers with long exponents.
func TestCanonicalJSONExponentArithmetic(t *testing.T) {
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

		got, err := CanonicalJSON([]byte(in), nil)
		if err != nil || string(got) != want {
			t.Fatalf("CanonicalJSON(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
}
