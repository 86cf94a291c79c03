package canonicaljson

import (
	"strconv"
)

// parseNumber parses the number at p.pos and returns its canonical form.
func (p *parser) parseNumber() (span, error) {
	d := p.doc
	start := p.pos
	i := start
	neg := d[i] == '-'
	if neg {
		i++
	}
	intStart := i
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		var err error
		if i, err = p.digitsEnd(i); err != nil {
			return span{}, err
		}
	default:
		p.pos = i
		return span{}, p.errorf("invalid number, expecting a digit")
	}
	intEnd := i
	fracStart, fracEnd := i, i
	if i < len(d) && d[i] == '.' {
		i++
		fracStart = i
		var err error
		if i, err = p.digitsEnd(i); err != nil {
			return span{}, err
		}
		fracEnd = i
		if fracStart == fracEnd {
			p.pos = i
			return span{}, p.errorf("invalid number, expecting a digit after '.'")
		}
	}
	expNeg := false
	expStart, expEnd := i, i
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			expNeg = d[i] == '-'
			i++
		}
		expStart = i
		var err error
		if i, err = p.digitsEnd(i); err != nil {
			return span{}, err
		}
		expEnd = i
		if expStart == expEnd {
			p.pos = i
			return span{}, p.errorf("invalid number, expecting a digit in the exponent")
		}
	}
	p.pos = i
	if err := p.poll(i); err != nil {
		return span{}, err
	}

	// Fast path: a plain integer other than -0 is already canonical unless
	// it ends in more than 21 zeros.
	if fracStart == fracEnd && expStart == expEnd && !(neg && d[intStart] == '0') {
		z := 0
		for j := intEnd - 1; j > intStart && d[j] == '0'; j-- {
			z++
		}
		if z <= maxPlainZeros {
			return span{int32(start), int32(i - start)}, nil
		}
	}

	// Significant digits D and exponent E with value = D × 10^E, D free of
	// leading and trailing zeros.
	digits := append(append(p.digits[:0], d[intStart:intEnd]...), d[fracStart:fracEnd]...)
	p.digits = digits
	for len(digits) > 0 && digits[0] == '0' {
		digits = digits[1:]
	}
	trailing := 0
	for len(digits) > 0 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		trailing++
	}
	if len(digits) == 0 {
		return span{int32(intStart), 1}, nil // a '0'
	}
	adjust := int64(trailing) - int64(fracEnd-fracStart)

	exp := d[expStart:expEnd]
	for len(exp) > 1 && exp[0] == '0' {
		exp = exp[1:]
	}
	out := len(p.scratch)
	if neg {
		p.scratch = append(p.scratch, '-')
	}
	if len(exp) <= 18 {
		var e int64 // < 10^18: no overflow
		for _, c := range exp {
			e = e*10 + int64(c-'0')
		}
		if expNeg {
			e = -e
		}
		p.scratch = appendDecimal(p.scratch, digits, e+adjust)
	} else {
		// |E| ≥ 10^18 - len(doc): only exponent form applies. The exponent
		// of the mantissa form is E + k, computed on the decimal digits
		// of E in time linear in their number (math/big's conversions
		// are quadratic, which a long exponent turns into seconds of
		// CPU).
		k := adjust + int64(len(digits)) - 1
		if expNeg {
			k = -k // -(|E| - k)
		}
		p.scratch = appendMantissa(p.scratch, digits)
		p.scratch = append(p.scratch, 'e')
		if expNeg {
			p.scratch = append(p.scratch, '-')
		}
		p.scratch = appendDecimalSum(p.scratch, exp, k)
	}
	return p.scratchSince(out), nil
}

// appendDecimalSum appends x + d in decimal, where x is the decimal digits
// of a number without leading zeros greater than |d|. It takes time linear
// in len(x).
func appendDecimalSum(b, x []byte, d int64) []byte {
	start := len(b)
	b = append(b, '0') // room for a carry
	b = append(b, x...)
	neg := d < 0
	if neg {
		d = -d
	}
	for i := len(b) - 1; d > 0; i-- {
		v := int64(b[i]-'0') + d%10
		if neg {
			v = int64(b[i]-'0') - d%10
		}
		d /= 10
		switch {
		case v >= 10:
			v -= 10
			d++
		case v < 0:
			v += 10
			d++
		}
		b[i] = '0' + byte(v)
	}
	z := start
	for z < len(b)-1 && b[z] == '0' {
		z++
	}
	return append(b[:start], b[z:]...)
}

// digitsEnd returns the end of the run of digits at i, polling ctx on the
// way: a number can be as long as the document.
func (p *parser) digitsEnd(i int) (int, error) {
	d := p.doc
	for i < len(d) && '0' <= d[i] && d[i] <= '9' {
		i++
		if i >= p.nextPoll {
			if err := p.poll(i); err != nil {
				return i, err
			}
		}
	}
	return i, nil
}

// maxPlainZeros is the most trailing zeros an integer is written with;
// beyond that it is written in exponent form, so that a short input such as
// 1e999999 cannot expand into a huge output.
const maxPlainZeros = 21

// appendDecimal appends digits × 10^e in canonical form. digits is non-empty
// and has no leading or trailing zeros.
func appendDecimal(b, digits []byte, e int64) []byte {
	n := int64(len(digits)) + e // position of the decimal point
	switch {
	case e >= 0 && e <= maxPlainZeros:
		b = append(b, digits...)
		for range e {
			b = append(b, '0')
		}
		return b
	case e < 0 && n > 0:
		b = append(b, digits[:n]...)
		b = append(b, '.')
		return append(b, digits[n:]...)
	case e < 0 && n > -6:
		b = append(b, '0', '.')
		for range -n {
			b = append(b, '0')
		}
		return append(b, digits...)
	default:
		b = appendMantissa(b, digits)
		b = append(b, 'e')
		return strconv.AppendInt(b, n-1, 10)
	}
}

// appendMantissa appends digits with a decimal point after the first.
func appendMantissa(b, digits []byte) []byte {
	b = append(b, digits[0])
	if len(digits) > 1 {
		b = append(b, '.')
		b = append(b, digits[1:]...)
	}
	return b
}
