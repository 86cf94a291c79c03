package retrysafe

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
)

// The commonest request body is a small flat object: a few members with
// plain names and scalar values, such as {"sku":"abc","qty":1}. Building a
// tree for it costs several times what reading it does, so appendCanonical
// first tries parseFlat, which reads such an object into a fixed array
// and, when it meets anything else, gives up and leaves the document to
// the tree. parseFlat accepts a document only when the tree would accept
// it too, with the same output: its names are their own canonical
// encoding, and its values are canonicalised by the tree's own code
// (parseString, parseNumber) unless they are plainly canonical already.

// maxFlatMembers is the most members parseFlat reads; larger objects go to
// canonParser.
const maxFlatMembers = 16

// maxFlatSize is the largest document parseFlat reads. It must stay below
// pollEvery: canonParser checks its context only once it has read that
// many bytes, so it never checks it for a shorter document, and parseFlat
// does not look at it.
const maxFlatSize = 16 << 10

// flatMember is one member of a flat object: its name doc[name:nameEnd]
// (without the quotes) and the canonical encoding of its value.
type flatMember struct {
	// prefix is the name's first eight bytes, big-endian, zero-padded:
	// names contain no zero byte, so prefixes order names as their bytes
	// do, and names of at most eight bytes with equal prefixes are equal.
	prefix        uint64
	name, nameEnd int32
	val           span // in the document or in the parser's scratch
	removed       bool
}

// parseFlat reads doc when it is an object of at most maxFlatMembers
// members whose names consist of plainASCII bytes (such a name needs no
// decoding, is its own canonical encoding, and folds as encoding/json
// folds ASCII) and whose values are strings, numbers or the literals true,
// false and null, no two names equal or equal under ASCII case folding. It
// stores the members in p.flat, sorted by name, and returns how many there
// are; values that need rewriting are written to p.scratch. For any other
// document, valid or not, it returns ok false, and the tree decides (after
// reset, which discards what parseFlat left in p).
func (p *canonParser) parseFlat(doc []byte) (n int, ok bool) {
	if len(doc) > maxFlatSize {
		return 0, false
	}
	m := &p.flat
	p.scratch = p.scratch[:0]
	// For parseString and parseNumber. The document is shorter than
	// pollEvery: they would not check a context.
	p.doc, p.ctx, p.nextPoll = doc, nil, math.MaxInt
	i := flatSpace(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return 0, false
	}
	i = flatSpace(doc, i+1)
	if i < len(doc) && doc[i] == '}' {
		return 0, flatSpace(doc, i+1) == len(doc)
	}
	for {
		// The name.
		if i >= len(doc) || doc[i] != '"' {
			return 0, false
		}
		name := i + 1
		i = plainEnd(doc, name)
		if i >= len(doc) || doc[i] != '"' {
			return 0, false
		}
		nameEnd := i
		i = flatSpace(doc, i+1)
		if i >= len(doc) || doc[i] != ':' {
			return 0, false
		}
		i = flatSpace(doc, i+1)
		if i >= len(doc) {
			return 0, false
		}

		// The value, in canonical form as parseValue makes it.
		var val span
		switch c := doc[i]; {
		case c == '"':
			if j := plainEnd(doc, i+1); j < len(doc) && doc[j] == '"' {
				val = span{int32(i), int32(j + 1 - i)} // its own encoding
				i = j + 1
				break
			}
			p.pos = i
			s, err := p.parseString()
			if err != nil {
				return 0, false
			}
			i = p.pos
			if s.off >= 0 {
				val = span{s.off - 1, s.n + 2}
			} else {
				start := len(p.scratch)
				p.scratch = appendQuoted(p.scratch, p.text(s))
				val = p.scratchSince(start)
			}
		case c == '-' || ('0' <= c && c <= '9'):
			if j := plainIntegerEnd(doc, i); j > i {
				val = span{int32(i), int32(j - i)} // its own encoding
				i = j
				break
			}
			p.pos = i
			v, err := p.parseNumber()
			if err != nil {
				return 0, false
			}
			val, i = v, p.pos
		case c == 't' || c == 'f' || c == 'n':
			lit := "null"
			if c == 't' {
				lit = "true"
			} else if c == 'f' {
				lit = "false"
			}
			if !bytes.HasPrefix(doc[i:], []byte(lit)) {
				return 0, false
			}
			val = span{int32(i), int32(len(lit))}
			i += len(lit)
		default:
			return 0, false // an object, an array or an error
		}
		if n == len(m) {
			return 0, false
		}
		m[n] = flatMember{name: int32(name), nameEnd: int32(nameEnd), val: val}
		n++

		// The separator.
		i = flatSpace(doc, i)
		if i >= len(doc) {
			return 0, false
		}
		if doc[i] == ',' {
			i = flatSpace(doc, i+1)
			continue
		}
		if doc[i] != '}' || flatSpace(doc, i+1) != len(doc) {
			return 0, false
		}
		break
	}

	for k := range n {
		m[k].prefix = namePrefix(doc, int(m[k].name), int(m[k].nameEnd))
	}
	// Sort by name (an insertion sort: few members, often in order
	// already), and leave duplicate names to canonParser's error (the
	// folding check below would find them too, later).
	for k := 1; k < n; k++ {
		x := m[k]
		j := k
		for ; j > 0; j-- {
			c := compareNames(doc, &m[j-1], &x)
			if c == 0 {
				return 0, false
			}
			if c < 0 {
				break
			}
			m[j] = m[j-1]
		}
		m[j] = x
	}
	// Names that differ only in ASCII letter case are one name to
	// encoding/json, so canonParser rejects them (checkFolded; the names
	// are ASCII, so no other folding applies). Such names have the same
	// length and the same prefix with every byte's 0x20 bit set.
	const lower = 0x2020202020202020
	for k := 1; k < n; k++ {
		a := &m[k]
		for j := range k {
			if b := &m[j]; a.prefix|lower == b.prefix|lower && a.nameEnd-a.name == b.nameEnd-b.name &&
				asciiEqualFold(doc[a.name:a.nameEnd], doc[b.name:b.nameEnd]) {
				return 0, false
			}
		}
	}
	return n, true
}

// plainIntegerEnd returns the end of the number at doc[i] when it is an
// integer that parseNumber writes as it is (not -0, no fraction or
// exponent, at most maxPlainZeros trailing zeros), else i.
func plainIntegerEnd(doc []byte, i int) int {
	j := i
	if doc[j] == '-' {
		j++
	}
	start := j
	switch {
	case j < len(doc) && doc[j] == '0' && j == i:
		j++
	case j < len(doc) && '1' <= doc[j] && doc[j] <= '9':
		for j < len(doc) && '0' <= doc[j] && doc[j] <= '9' {
			j++
		}
		z := 0
		for k := j - 1; k > start && doc[k] == '0'; k-- {
			z++
		}
		if z > maxPlainZeros {
			return i
		}
	default:
		return i
	}
	if j < len(doc) && (doc[j] == '.' || doc[j] == 'e' || doc[j] == 'E') {
		return i
	}
	return j
}

// namePrefix returns the first eight bytes of the name doc[name:nameEnd],
// big-endian, padded with zero bytes.
func namePrefix(doc []byte, name, nameEnd int) uint64 {
	n := nameEnd - name
	if len(doc) >= 8 {
		var p uint64
		if name+8 <= len(doc) {
			p = binary.BigEndian.Uint64(doc[name:])
		} else {
			// The last eight bytes of doc, shifted to start at name.
			p = binary.BigEndian.Uint64(doc[len(doc)-8:]) << (8 * (name - (len(doc) - 8)))
		}
		if n < 8 {
			p &^= 1<<(8*(8-n)) - 1 // all ones for n == 0
		}
		return p
	}
	var p uint64
	for k := range 8 {
		p <<= 8
		if k < n {
			p |= uint64(doc[name+k])
		}
	}
	return p
}

// compareNames compares the names of a and b bytewise.
func compareNames(doc []byte, a, b *flatMember) int {
	if a.prefix != b.prefix {
		if a.prefix < b.prefix {
			return -1
		}
		return 1
	}
	return bytes.Compare(doc[a.name:a.nameEnd], doc[b.name:b.nameEnd])
}

// flatSpace returns the index of the first byte of doc at or after i that
// is not JSON whitespace.
func flatSpace(doc []byte, i int) int {
	if i < len(doc) && doc[i] > ' ' {
		return i // the usual case, checked first
	}
	for i < len(doc) {
		switch doc[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// asciiEqualFold reports whether the ASCII strings a and b, of equal
// length, are equal with their letters upper-cased.
func asciiEqualFold(a, b []byte) bool {
	for i := range a {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if x|0x20 != y|0x20 || x|0x20 < 'a' || x|0x20 > 'z' {
			return false
		}
	}
	return true
}

// removeFlat marks the members of m that ignore addresses as removed. The
// pointers are valid. A pointer of one token addresses the member of that
// name; longer ones address something inside a member's value, a scalar:
// nothing.
func removeFlat(doc []byte, m []flatMember, ignore []string) {
	for _, ptr := range ignore {
		if ptr == "" || strings.IndexByte(ptr[1:], '/') >= 0 {
			continue
		}
		tok := ptr[1:]
		if strings.IndexByte(tok, '~') >= 0 {
			tok = pointerTokens(ptr)[0]
		}
		for k := range m {
			if string(doc[m[k].name:m[k].nameEnd]) == tok {
				m[k].removed = true
				break
			}
		}
	}
}

// appendFlat appends the canonical encoding of the object parseFlat read
// into m.
func (p *canonParser) appendFlat(b []byte, m []flatMember) []byte {
	b = append(b, '{')
	first := true
	for k := range m {
		x := &m[k]
		if x.removed {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		if x.val.off == x.nameEnd+2 {
			// "name":value in the document, no space around the
			// colon: one copy.
			b = append(b, p.doc[x.name-1:x.val.off+x.val.n]...)
			continue
		}
		b = append(b, p.doc[x.name-1:x.nameEnd+1]...)
		b = append(b, ':')
		b = append(b, p.text(x.val)...)
	}
	return append(b, '}')
}
