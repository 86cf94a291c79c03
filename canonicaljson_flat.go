package retrysafe

import (
	"bytes"
	"encoding/binary"
	"strings"
	"unicode/utf8"
)

// The commonest request body is a small flat object: a few members with
// plain names and values that are short strings, integers or literals,
// such as {"sku":"abc","qty":1}. Building a tree for it (canonParser) costs
// several times what reading it does, so appendCanonical first tries
// parseFlat, which reads such an object into a fixed array and, when it
// meets anything else, gives up and leaves the document to canonParser.
// parseFlat accepts a document only when canonParser would accept it too,
// with the same output: every member name and value it accepts is in
// canonical form in the document already, so the output is the document's
// own bytes, reordered.

// maxFlatMembers is the most members parseFlat reads; larger objects go to
// canonParser.
const maxFlatMembers = 16

// maxFlatSize is the largest document parseFlat reads. It must stay below
// pollEvery: canonParser checks its context only once it has read that
// many bytes, so it never checks it for a shorter document, and parseFlat
// does not look at it.
const maxFlatSize = 16 << 10

// flatMember locates one member of a flat object in the document: its name
// doc[name:nameEnd] (without the quotes) and its value doc[val:valEnd].
type flatMember struct {
	// prefix is the name's first eight bytes, big-endian, zero-padded:
	// names contain no zero byte, so prefixes order names as their bytes
	// do, and names of at most eight bytes with equal prefixes are equal.
	prefix                     uint64
	name, nameEnd, val, valEnd int32
	removed                    bool
}

// parseFlat reads doc when it is an object of at most maxFlatMembers
// members whose names consist of plainASCII bytes (such a name needs no
// decoding, is its own canonical encoding, and folds as encoding/json
// folds ASCII) and whose values are strings without escapes, integers in
// canonical form (not -0, at most maxPlainZeros trailing zeros) or the
// literals true, false and null, no two names equal or equal under ASCII
// case folding. It stores the members in m, sorted by name, and returns
// how many there are. For any other document, valid or not, it returns ok
// false, and canonParser decides.
func parseFlat(doc []byte, m *[maxFlatMembers]flatMember) (n int, ok bool) {
	if len(doc) > maxFlatSize {
		return 0, false
	}
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

		// The value.
		val := i
		switch c := doc[i]; {
		case c == '"':
			i++
			for {
				i = plainEnd(doc, i)
				if i >= len(doc) {
					return 0, false
				}
				if c := doc[i]; c == '"' {
					break
				} else if c < utf8.RuneSelf {
					return 0, false // an escape or a control character
				}
				r, size := utf8.DecodeRune(doc[i:])
				if r == utf8.RuneError && size == 1 {
					return 0, false
				}
				i += size
			}
			i++
		case c == '-' || ('0' <= c && c <= '9'):
			if c == '-' {
				i++
			}
			start := i
			switch {
			case i < len(doc) && doc[i] == '0':
				if c == '-' {
					return 0, false // -0, written 0
				}
				i++
			case i < len(doc) && '1' <= doc[i] && doc[i] <= '9':
				for i < len(doc) && '0' <= doc[i] && doc[i] <= '9' {
					i++
				}
				z := 0
				for j := i - 1; j > start && doc[j] == '0'; j-- {
					z++
				}
				if z > maxPlainZeros {
					return 0, false // written in exponent form
				}
			default:
				return 0, false
			}
			// A fraction or an exponent would start with a '.', an 'e'
			// or an 'E', which the separator below refuses.
		case c == 't':
			if !bytes.HasPrefix(doc[i:], []byte("true")) {
				return 0, false
			}
			i += len("true")
		case c == 'f':
			if !bytes.HasPrefix(doc[i:], []byte("false")) {
				return 0, false
			}
			i += len("false")
		case c == 'n':
			if !bytes.HasPrefix(doc[i:], []byte("null")) {
				return 0, false
			}
			i += len("null")
		default:
			return 0, false // an object, an array or an error
		}
		if n == len(m) {
			return 0, false
		}
		m[n] = flatMember{prefix: namePrefix(doc, name, nameEnd), name: int32(name), nameEnd: int32(nameEnd), val: int32(val), valEnd: int32(i)}
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
func appendFlat(b, doc []byte, m []flatMember) []byte {
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
		if x.val == x.nameEnd+2 {
			// "name":value, no space around the colon: one copy.
			b = append(b, doc[x.name-1:x.valEnd]...)
			continue
		}
		b = append(b, doc[x.name-1:x.nameEnd+1]...)
		b = append(b, ':')
		b = append(b, doc[x.val:x.valEnd]...)
	}
	return append(b, '}')
}
