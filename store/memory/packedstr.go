package memory

// A packed record (see completed) keeps its scope, key, fingerprint and
// owner token in the shortest of a few forms, since they are most of its
// size and usually machine-made: the middleware's fingerprint is 64
// lowercase hex digits (32 bytes as bytes), its tokens 32 (16 bytes),
// its default scope a hex hash, and most clients' keys are UUIDs (16
// bytes instead of 36). A form is lossless: a string that is not exactly
// in it (an uppercase hex digit in a fingerprint, a UUID in mixed case)
// is kept as it is.
//
// A completed record of the middleware (a UUID key, a small JSON answer)
// went from 289 bytes (a 320-byte allocation) to about 200, and the store
// from about 360 bytes per key to 240, the table included
// (docs/performance.md, "Eighth round").

// form is how a packed string is stored.
type form uint8

const (
	formRaw       form = iota // as it is
	formHex                   // lowercase hex digits, an even number of them: stored as the bytes they spell
	formUUID                  // a UUID, 8-4-4-4-12 lowercase hex digits: stored as its 16 bytes
	formUUIDUpper             // the same in uppercase
)

// formBits is the width of a form in completed.forms.
const formBits = 2

// uuidLen is the length of a UUID's text.
const uuidLen = 36

// isUUIDDash reports whether position k of a UUID's text is a dash.
func isUUIDDash(k int) bool { return k == 8 || k == 13 || k == 18 || k == 23 }

// appendCompact appends s to b in the most compact form it has, and
// returns b and the form: a UUID (lowercase, digits alone included, then
// uppercase), else lowercase hex of an even length, else raw. One pass
// over s: the digits are decoded as they are checked.
func appendCompact(b []byte, s string) ([]byte, form) {
	start := len(b)
	switch {
	case len(s) == uuidLen && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-':
		for _, f := range [2]form{formUUID, formUUIDUpper} {
			if d, ok := appendDigits(b[:start], s, hexTableOf(f), true); ok {
				return d, f
			}
		}
	case len(s) >= 2 && len(s)%2 == 0:
		if d, ok := appendDigits(b[:start], s, &hexLower, false); ok {
			return d, formHex
		}
	}
	return append(b[:start], s...), formRaw
}

// appendDigits appends to b the bytes that the pairs of hex digits of s
// spell, t giving the digits' values (-1 for a byte that is none), a
// UUID's dashes skipped when uuid, and reports whether every byte read
// was a digit.
func appendDigits(b []byte, s string, t *[256]int8, uuid bool) ([]byte, bool) {
	var bad int8 // negative once a byte is no digit
	for k := 0; k+1 < len(s); k += 2 {
		if uuid && isUUIDDash(k) {
			k++
		}
		hi, lo := t[s[k]], t[s[k+1]]
		bad |= hi | lo
		b = append(b, byte(hi)<<4|byte(lo))
	}
	return b, bad >= 0
}

// hexTableOf returns the table of the hex digits of form f's case.
func hexTableOf(f form) *[256]int8 {
	if f == formUUIDUpper {
		return &hexUpper
	}
	return &hexLower
}

// hexLower and hexUpper are the values of the hex digits of one case, -1
// for any other byte.
var hexLower, hexUpper = hexTable("0123456789abcdef"), hexTable("0123456789ABCDEF")

func hexTable(digits string) (t [256]int8) {
	for k := range t {
		t[k] = -1
	}
	for v := range len(digits) {
		t[digits[v]] = int8(v)
	}
	return t
}

// textLen returns the length of the string stored as p in form f.
func textLen(p string, f form) int {
	switch f {
	case formRaw:
		return len(p)
	case formHex:
		return 2 * len(p)
	}
	return uuidLen
}

// appendText appends the string stored as p in form f to b.
func appendText(b []byte, p string, f form) []byte {
	if f == formRaw {
		return append(b, p...)
	}
	digits := "0123456789abcdef"
	if f == formUUIDUpper {
		digits = "0123456789ABCDEF"
	}
	for k := 0; k < len(p); k++ {
		if f != formHex && (k == 4 || k == 6 || k == 8 || k == 10) {
			b = append(b, '-')
		}
		b = append(b, digits[p[k]>>4], digits[p[k]&0xf])
	}
	return b
}

// equalText reports whether the string stored as p in form f is s,
// without making it.
func equalText(p string, f form, s string) bool {
	switch f {
	case formRaw:
		return p == s
	case formHex:
		if len(s) != 2*len(p) {
			return false
		}
	default:
		if len(s) != uuidLen {
			return false
		}
	}
	t := hexTableOf(f)
	for k, j := 0, 0; j < len(p); j++ {
		if f != formHex && isUUIDDash(k) {
			if s[k] != '-' {
				return false
			}
			k++
		}
		hi, lo := t[s[k]], t[s[k+1]]
		if hi < 0 || lo < 0 || byte(hi<<4|lo) != p[j] {
			return false
		}
		k += 2
	}
	return true
}
