package canonicaljson

import (
	"strconv"
	"unicode/utf8"
)

// parseString parses the string at p.pos (a '"') and returns the decoded
// string. The span is in doc exactly when the string needed no decoding; its
// quoted source text is then also its canonical encoding.
func (p *parser) parseString() (span, error) {
	start := p.pos
	i := start + 1
	for i < len(p.doc) {
		if err := p.poll(i); err != nil {
			return span{}, err
		}
		c := p.doc[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return span{int32(start + 1), int32(i - start - 1)}, nil
		case c == '\\' || c < 0x20:
			return p.parseStringSlow(start, i)
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(p.doc[i:])
			if r == utf8.RuneError && size == 1 {
				p.pos = i
				return span{}, p.errorf("invalid UTF-8 in string")
			}
			i += size
		}
	}
	p.pos = i
	return span{}, p.errorf("unexpected end of input in string")
}

// parseStringSlow decodes the string starting at start whose first i-start
// bytes need no decoding.
func (p *parser) parseStringSlow(start, i int) (span, error) {
	out := len(p.scratch)
	p.scratch = append(p.scratch, p.doc[start+1:i]...)
	for i < len(p.doc) {
		if err := p.poll(i); err != nil {
			return span{}, err
		}
		c := p.doc[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return p.scratchSince(out), nil
		case c < 0x20:
			p.pos = i
			return span{}, p.errorf("control character %s in string must be escaped", quoteByte(c))
		case c == '\\':
			if i+1 >= len(p.doc) {
				p.pos = i
				return span{}, p.errorf("unexpected end of input in string escape")
			}
			e := p.doc[i+1]
			switch e {
			case '"', '\\', '/':
				p.scratch = append(p.scratch, e)
			case 'b':
				p.scratch = append(p.scratch, '\b')
			case 'f':
				p.scratch = append(p.scratch, '\f')
			case 'n':
				p.scratch = append(p.scratch, '\n')
			case 'r':
				p.scratch = append(p.scratch, '\r')
			case 't':
				p.scratch = append(p.scratch, '\t')
			case 'u':
				r, ok := hex4(p.doc[i+2:])
				if !ok {
					p.pos = i
					return span{}, p.errorf("invalid \\u escape in string, expecting four hex digits")
				}
				i += 6
				if 0xD800 <= r && r < 0xDC00 && len(p.doc) >= i+6 && p.doc[i] == '\\' && p.doc[i+1] == 'u' {
					if lo, ok := hex4(p.doc[i+2:]); ok && 0xDC00 <= lo && lo < 0xE000 {
						p.scratch = utf8.AppendRune(p.scratch, 0x10000+(r-0xD800)<<10+(lo-0xDC00))
						i += 6
						continue
					}
				}
				p.scratch = appendRune3(p.scratch, r)
				continue
			default:
				p.pos = i
				return span{}, p.errorf("invalid escape %s in string", strconv.Quote(string(p.doc[i:i+2])))
			}
			i += 2
		case c < utf8.RuneSelf:
			p.scratch = append(p.scratch, c)
			i++
		default:
			r, size := utf8.DecodeRune(p.doc[i:])
			if r == utf8.RuneError && size == 1 {
				p.pos = i
				return span{}, p.errorf("invalid UTF-8 in string")
			}
			p.scratch = append(p.scratch, p.doc[i:i+size]...)
			i += size
		}
	}
	p.pos = i
	return span{}, p.errorf("unexpected end of input in string")
}

// appendRune3 appends r (< 0x10000) in the UTF-8 bit layout even when r is a
// surrogate, which UTF-8 forbids. Lone surrogates from \u escapes are kept
// this way (as in WTF-8); raw input can never contain these bytes because it
// must be valid UTF-8, so they stay distinct from every real character.
func appendRune3(b []byte, r rune) []byte {
	if r < 0xD800 || r >= 0xE000 {
		return utf8.AppendRune(b, r)
	}
	return append(b, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

const hexDigits = "0123456789abcdef"

// appendQuoted appends the canonical JSON string encoding of the decoded
// string s.
func appendQuoted(b []byte, s []byte) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		var esc string
		switch {
		case c == '"':
			esc = `\"`
		case c == '\\':
			esc = `\\`
		case c == '\b':
			esc = `\b`
		case c == '\f':
			esc = `\f`
		case c == '\n':
			esc = `\n`
		case c == '\r':
			esc = `\r`
		case c == '\t':
			esc = `\t`
		case c < 0x20:
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			start = i + 1
			continue
		case c == 0xED && i+2 < len(s) && s[i+1] >= 0xA0:
			// A lone surrogate kept by appendRune3.
			r := rune(c&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F)
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', hexDigits[r>>12], hexDigits[r>>8&0xF], hexDigits[r>>4&0xF], hexDigits[r&0xF])
			i += 2
			start = i + 1
			continue
		default:
			continue
		}
		b = append(b, s[start:i]...)
		b = append(b, esc...)
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
