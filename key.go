package retrysafe

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/retrysafe/retrysafe/internal/keyquote"
)

// ParseKey parses an Idempotency-Key header value and returns the key.
//
// The draft standard defines the header as a Structured-Field (RFC 9651)
// String: a quoted string ("abc") whose only escapes are \" and \\. Most
// clients send the key bare instead (abc, or a bare UUID). Both forms yield
// the same key abc. Leading and trailing spaces and tabs around the value are
// ignored.
//
// A bare key is taken literally: it is a run of visible ASCII characters
// (0x21-0x7E) other than '"', ',' and ';'. A quote inside it means a
// malformed string, a comma means a list of several keys, a semicolon means
// Structured-Field parameters; all three are rejected, as are parameters
// after a quoted string (for example "abc";v=1).
//
// The decoded key must be 1 to [MaxKeyLength] printable ASCII characters
// (0x20-0x7E). Otherwise ParseKey returns a *[KeyError], which matches
// [ErrInvalidKey], whose Reason tells the client what to fix. Positions in
// reasons count bytes of v from 0.
func ParseKey(v string) (string, error) {
	start, end := 0, len(v)
	for start < end && isSPHTAB(v[start]) {
		start++
	}
	for end > start && isSPHTAB(v[end-1]) {
		end--
	}
	if start == end {
		return "", checkKey("")
	}
	if v[start] == '"' {
		return parseQuotedKey(v, start, end)
	}
	return parseBareKey(v, start, end)
}

func parseBareKey(v string, start, end int) (string, error) {
	for i := start; i < end; i++ {
		if bareKeyByte[v[i]] {
			continue
		}
		switch c := v[i]; {
		case c == ' ':
			return "", keyErr("unexpected space at position %d: a key containing spaces must be sent as a quoted string, e.g. %s", i, keyquote.Quote(v[start:end]))
		case c == '"':
			return "", keyErr("unexpected '\"' at position %d: quote the whole key (\"...\") and escape inner quotes as \\\"", i)
		case c == ',':
			return "", keyErr("unexpected ',' at position %d: send exactly one key, not a list", i)
		case c == ';':
			return "", keyErr("unexpected ';' at position %d: Structured-Field parameters are not supported", i)
		case c < 0x20 || c > 0x7E:
			return "", nonPrintable(v, i)
		}
	}
	if n := end - start; n > MaxKeyLength {
		return "", tooLong(n)
	}
	return v[start:end], nil
}

// bareKeyByte reports the bytes a bare key may contain: printable ASCII
// but space, '"', ',' and ';' (parseBareKey explains each refusal).
var bareKeyByte = func() (t [256]bool) {
	for c := 0x21; c <= 0x7E; c++ {
		t[c] = c != '"' && c != ',' && c != ';'
	}
	return t
}()

func parseQuotedKey(v string, start, end int) (string, error) {
	var b strings.Builder // used only when the string contains escapes
	escaped := false
	seg := start + 1 // start of the current run of unescaped characters
	n := 0           // decoded length
	for i := start + 1; i < end; i++ {
		c := v[i]
		switch {
		case c == '\\':
			if i+1 >= end {
				return "", keyErr("unterminated string: '\\' at position %d ends the value; add the closing '\"'", i)
			}
			if e := v[i+1]; e != '"' && e != '\\' {
				if e < 0x20 || e > 0x7E {
					return "", keyErr("bad escape at position %d: only \\\" and \\\\ are allowed in a quoted key", i)
				}
				return "", keyErr("bad escape \\%c at position %d: only \\\" and \\\\ are allowed in a quoted key", e, i)
			}
			if !escaped {
				escaped = true
				b.Grow(end - start)
			}
			b.WriteString(v[seg:i])
			seg = i + 1 // the escaped character starts the next run
			i++
			n++
		case c == '"':
			if n == 0 {
				return "", keyErr("empty key: the quoted string \"\" holds no characters")
			}
			if n > MaxKeyLength {
				return "", tooLong(n)
			}
			if rest := i + 1; rest < end {
				switch v[rest] {
				case ';':
					return "", keyErr("unexpected ';' at position %d after the string: Structured-Field parameters are not supported", rest)
				case ',':
					return "", keyErr("unexpected ',' at position %d after the string: send exactly one key, not a list", rest)
				default:
					return "", keyErr("trailing characters at position %d after the closing '\"'", rest)
				}
			}
			if !escaped {
				return v[start+1 : i], nil
			}
			b.WriteString(v[seg:i])
			return b.String(), nil
		case c < 0x20 || c > 0x7E:
			return "", nonPrintable(v, i)
		default:
			n++
		}
	}
	return "", keyErr("unterminated string: missing closing '\"'")
}

// nonPrintable describes the byte at v[i], which is outside 0x20-0x7E.
func nonPrintable(v string, i int) error {
	c := v[i]
	if c < utf8.RuneSelf {
		return keyErr("non-printable character 0x%02X at position %d: a key holds only characters 0x20-0x7E", c, i)
	}
	if r, size := utf8.DecodeRuneInString(v[i:]); r != utf8.RuneError || size > 1 {
		return keyErr("non-ASCII character %U at position %d: a key holds only characters 0x20-0x7E", r, i)
	}
	return keyErr("non-ASCII byte 0x%02X at position %d: a key holds only characters 0x20-0x7E", c, i)
}

// checkKey applies the rules every decoded key meets: 1 to [MaxKeyLength]
// printable ASCII characters (0x20-0x7E). ParseKey enforces them while it
// decodes a header value; [Do] applies them to the key it is given.
func checkKey(key string) error {
	if key == "" {
		return keyErr("empty key: the value holds no characters")
	}
	if len(key) > MaxKeyLength {
		return tooLong(len(key))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7E {
			return nonPrintable(key, i)
		}
	}
	return nil
}

// tooLong describes a key of n > MaxKeyLength characters.
func tooLong(n int) error { return keyErr("too long: %d characters > %d", n, MaxKeyLength) }

func keyErr(format string, args ...any) error {
	return &KeyError{Reason: fmt.Sprintf(format, args...)}
}

func isSPHTAB(c byte) bool { return c == ' ' || c == '\t' }
