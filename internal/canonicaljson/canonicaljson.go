// Package canonicaljson writes JSON documents in a canonical form, so that
// documents that mean the same thing encode to the same bytes: the request
// fingerprint hashes a JSON body's canonical form, so a retry that only
// reorders members, changes whitespace or spells a number differently
// still matches. The form is pinned by the root package's golden
// fingerprints: a change to it turns every stored record's retry into a
// mismatch.
package canonicaljson

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
)

// MaxDepth bounds the nesting of objects and arrays Append accepts.
const MaxDepth = 1000

// ErrDuplicateKey is wrapped by Append's error for an object that names the
// same member twice.
var ErrDuplicateKey = errors.New("duplicate object key")

// Append appends a canonical encoding of the JSON document doc (RFC 8259)
// to dst:
//
//   - no insignificant whitespace;
//   - object members sorted by name, comparing the decoded names bytewise;
//   - strings re-encoded one way: '"', '\' and control characters escaped
//     (\b \f \n \r \t, otherwise \u00XX), every other character written as
//     UTF-8, so "\u00e9" and "é" are equal. An escaped lone surrogate
//     ("\ud800") is kept as a lowercase \u escape;
//   - numbers rewritten from their exact decimal value as written, never
//     through float64: 1, 1.0, 1e0 and 10e-1 are equal, -0 equals 0, and
//     12345678901234567890 differs from 12345678901234567891. A number is
//     written as an integer when it is one with at most 21 trailing zeros,
//     as a decimal fraction when its magnitude is at least 1e-6, and in
//     exponent form (1.5e30, 1e-7) otherwise;
//   - every member addressed by one of the ignore JSON Pointers (RFC 6901)
//     removed. Pointers may index arrays (/items/0/note) and refer to the
//     document as given, before any removal. Pointers that match nothing
//     are fine; the empty pointer "" addresses the whole document, which is
//     not a member, so it removes nothing.
//
// Append returns a nil slice and an error if doc is not exactly one JSON
// value (trailing data is an error), if a string holds invalid UTF-8, if an
// object has two members with the same decoded name (the document is
// ambiguous) or with names that encoding/json would match to one struct
// field (equal under simple Unicode case folding as in [strings.EqualFold],
// a lone surrogate read as U+FFFD: {"amount":1,"Amount":1000} means 1000 to
// such a decoder and {"Amount":1000,"amount":1} means 1, so they must not
// share a canonical form), if objects and arrays nest deeper than
// [MaxDepth] levels, if doc is larger than 256 MiB, or if an ignore entry
// is not a valid JSON Pointer (see [ValidatePointer]). It does not panic on
// any input.
//
// Append stops, with an error wrapping ctx.Err(), once ctx ends. It checks
// ctx every 64 KiB of input (between values and inside strings and
// numbers) and after sorting a large object; every step in between is
// linear in the input it reads, so it stops after at most about 64 KiB
// more work.
func Append(ctx context.Context, dst, doc []byte, ignore []string) ([]byte, error) {
	if len(doc) > maxJSONSize {
		return nil, fmt.Errorf("canonical JSON: document of %d bytes is larger than %d", len(doc), maxJSONSize)
	}
	p := parsers.Get().(*parser)
	defer func() {
		if p.trim() {
			parsers.Put(p)
		}
	}()
	p.reset(doc)
	if ctx.Done() != nil {
		p.ctx, p.nextPoll = ctx, pollEvery
	}
	root, err := p.parseDocument()
	if err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	if err := validatePointers(ignore); err != nil {
		return nil, err
	}
	for _, ptr := range ignore {
		if ptr != "" {
			p.remove(root, ptr)
		}
	}
	return p.emit(dst, root), nil
}

// pollEvery is how many bytes of input the parser reads between checks of
// its context.
const pollEvery = 64 << 10

// parsers recycles parsers and their buffers between calls.
var parsers = sync.Pool{New: func() any { return new(parser) }}

func (p *parser) reset(doc []byte) {
	p.doc, p.pos, p.depth = doc, 0, 0
	p.ctx, p.nextPoll = nil, math.MaxInt
	p.nodes = slices.Grow(p.nodes[:0], len(doc)/8+4)
	p.kids = slices.Grow(p.kids[:0], len(doc)/8+4)
	p.stack = p.stack[:0]
	p.scratch = p.scratch[:0]
	p.digits = p.digits[:0]
	p.folds = p.folds[:0]
}

// trim lets go of the document and context of the last call and reports
// whether p may be kept for reuse: not when its buffers grew large, which
// would pin memory for one unusual document.
func (p *parser) trim() bool {
	p.doc, p.ctx = nil, nil
	return cap(p.nodes) <= 1<<15 && cap(p.kids) <= 1<<15 && cap(p.scratch) <= 1<<18 && cap(p.stack) <= 1<<12 && cap(p.folds) <= 1<<12
}

const (
	kindScalar uint8 = iota
	kindObject
	kindArray
)

// maxJSONSize bounds the documents Append accepts, so that offsets
// fit in int32 even after numbers expand.
const maxJSONSize = 1 << 28

// span locates text: doc[off:off+n] when off >= 0, else
// scratch[^off:^off+n].
type span struct{ off, n int32 }

// jnode is one value of the parsed document. It holds no pointers, so a
// large tree costs the garbage collector nothing to scan.
type jnode struct {
	key        span  // decoded member name, for members of objects
	val        span  // canonical encoding, for scalars
	kids, nkid int32 // children: parser.kids[kids : kids+nkid]
	kind       uint8
	removed    bool
}

// parser parses a document into a tree of jnodes. Strings that need no
// re-encoding, literals and plain integers are referenced in doc; everything
// else is written once to scratch, which is only ever appended to.
type parser struct {
	doc     []byte
	pos     int
	depth   int
	nodes   []jnode
	kids    []int32 // children of all objects and arrays, one run each
	stack   []int32 // children of the objects and arrays being parsed
	scratch []byte
	digits  []byte      // a number's significant digits, reused
	folds   []foldEntry // for checkFolded, reused

	// ctx is the context of the current call, checked by poll once pos
	// reaches nextPoll; nil (and nextPoll MaxInt) when it cannot end.
	ctx      context.Context
	nextPoll int
}

// poll returns ctx's error if it has ended, checking it only once pos
// reaches nextPoll.
func (p *parser) poll(pos int) error {
	if pos < p.nextPoll {
		return nil
	}
	p.nextPoll = pos + pollEvery
	return p.ctx.Err()
}

// text returns the bytes s locates.
func (p *parser) text(s span) []byte {
	if s.off >= 0 {
		return p.doc[s.off : s.off+s.n : s.off+s.n]
	}
	off := ^s.off
	return p.scratch[off : off+s.n : off+s.n]
}

// scratchSince returns the span of scratch written since offset start.
func (p *parser) scratchSince(start int) span {
	return span{^int32(start), int32(len(p.scratch) - start)}
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("%s at offset %d", fmt.Sprintf(format, args...), p.pos)
}

func (p *parser) skipSpace() {
	for p.pos < len(p.doc) {
		switch p.doc[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) parseDocument() (int32, error) {
	root, err := p.parseValue()
	if err != nil {
		return 0, err
	}
	p.skipSpace()
	if p.pos < len(p.doc) {
		return 0, p.errorf("unexpected data after the JSON value")
	}
	return root, nil
}

func (p *parser) newNode(kind uint8) int32 {
	p.nodes = append(p.nodes, jnode{kind: kind})
	return int32(len(p.nodes) - 1)
}

func (p *parser) parseValue() (int32, error) {
	if err := p.poll(p.pos); err != nil {
		return 0, err
	}
	p.skipSpace()
	if p.pos >= len(p.doc) {
		return 0, p.errorf("unexpected end of input, expecting a value")
	}
	switch c := p.doc[p.pos]; {
	case c == '{':
		return p.parseObject()
	case c == '[':
		return p.parseArray()
	case c == '"':
		s, err := p.parseString()
		if err != nil {
			return 0, err
		}
		n := p.newNode(kindScalar)
		if s.off >= 0 {
			// Already canonical: the quoted source text.
			p.nodes[n].val = span{s.off - 1, s.n + 2}
		} else {
			start := len(p.scratch)
			p.scratch = appendQuoted(p.scratch, p.text(s))
			p.nodes[n].val = p.scratchSince(start)
		}
		return n, nil
	case c == '-' || ('0' <= c && c <= '9'):
		v, err := p.parseNumber()
		if err != nil {
			return 0, err
		}
		n := p.newNode(kindScalar)
		p.nodes[n].val = v
		return n, nil
	case c == 't':
		return p.parseLiteral("true")
	case c == 'f':
		return p.parseLiteral("false")
	case c == 'n':
		return p.parseLiteral("null")
	default:
		return 0, p.errorf("invalid character %s looking for the beginning of a value", quoteByte(c))
	}
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7F {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("0x%02X", c)
}

func (p *parser) parseLiteral(lit string) (int32, error) {
	if !bytes.HasPrefix(p.doc[p.pos:], []byte(lit)) {
		return 0, p.errorf("invalid literal, expecting %s", lit)
	}
	n := p.newNode(kindScalar)
	p.nodes[n].val = span{int32(p.pos), int32(len(lit))}
	p.pos += len(lit)
	return n, nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.errorf("objects and arrays nested deeper than %d levels", MaxDepth)
	}
	return nil
}

// finish stores the children pushed on the stack since base as node n's.
func (p *parser) finish(n int32, base int) {
	kids := p.stack[base:]
	p.nodes[n].kids = int32(len(p.kids))
	p.nodes[n].nkid = int32(len(kids))
	p.kids = append(p.kids, kids...)
	p.stack = p.stack[:base]
	p.depth--
}

func (p *parser) parseArray() (int32, error) {
	if err := p.enter(); err != nil {
		return 0, err
	}
	n := p.newNode(kindArray)
	base := len(p.stack)
	p.pos++ // '['
	p.skipSpace()
	if p.pos < len(p.doc) && p.doc[p.pos] == ']' {
		p.pos++
		p.finish(n, base)
		return n, nil
	}
	for {
		v, err := p.parseValue()
		if err != nil {
			return 0, err
		}
		p.stack = append(p.stack, v)
		p.skipSpace()
		if p.pos >= len(p.doc) {
			return 0, p.errorf("unexpected end of input in array")
		}
		switch p.doc[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			p.finish(n, base)
			return n, nil
		default:
			return 0, p.errorf("invalid character %s after array element, expecting ',' or ']'", quoteByte(p.doc[p.pos]))
		}
	}
}

func (p *parser) parseObject() (int32, error) {
	if err := p.enter(); err != nil {
		return 0, err
	}
	n := p.newNode(kindObject)
	base := len(p.stack)
	p.pos++ // '{'
	p.skipSpace()
	if p.pos < len(p.doc) && p.doc[p.pos] == '}' {
		p.pos++
		p.finish(n, base)
		return n, nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.doc) || p.doc[p.pos] != '"' {
			if p.pos >= len(p.doc) {
				return 0, p.errorf("unexpected end of input in object, expecting a member name")
			}
			return 0, p.errorf("invalid character %s, expecting a member name in double quotes", quoteByte(p.doc[p.pos]))
		}
		key, err := p.parseString()
		if err != nil {
			return 0, err
		}
		p.skipSpace()
		if p.pos >= len(p.doc) || p.doc[p.pos] != ':' {
			return 0, p.errorf("expecting ':' after object member name")
		}
		p.pos++
		v, err := p.parseValue()
		if err != nil {
			return 0, err
		}
		p.nodes[v].key = key
		p.stack = append(p.stack, v)
		p.skipSpace()
		if p.pos >= len(p.doc) {
			return 0, p.errorf("unexpected end of input in object")
		}
		switch p.doc[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			if err := p.sortMembers(base); err != nil {
				return 0, err
			}
			p.finish(n, base)
			return n, nil
		default:
			return 0, p.errorf("invalid character %s after object member, expecting ',' or '}'", quoteByte(p.doc[p.pos]))
		}
	}
}

// sortMembers sorts the members pushed since base by name and rejects
// duplicate names.
func (p *parser) sortMembers(base int) error {
	m := p.stack[base:]
	if len(m) <= maxInsertionSort {
		// Insertion sort: members already in order cost one comparison
		// each, and a name inserted next to its twin meets it on the way
		// (the names before it are sorted and distinct).
		for i := 1; i < len(m); i++ {
			k := m[i]
			key := p.text(p.nodes[k].key)
			j := i
			for ; j > 0; j-- {
				c := bytes.Compare(p.text(p.nodes[m[j-1]].key), key)
				if c == 0 {
					return p.duplicate(p.nodes[k].key)
				}
				if c < 0 {
					break
				}
				m[j] = m[j-1]
			}
			m[j] = k
		}
		return p.checkFolded(m)
	}
	sorted := true
	for i := 1; i < len(m); i++ {
		c := bytes.Compare(p.text(p.nodes[m[i-1]].key), p.text(p.nodes[m[i]].key))
		if c == 0 {
			return p.duplicate(p.nodes[m[i]].key)
		}
		if c > 0 {
			sorted = false
		}
	}
	if !sorted {
		slices.SortFunc(m, func(a, b int32) int { return bytes.Compare(p.text(p.nodes[a].key), p.text(p.nodes[b].key)) })
		if err := p.pollSorted(len(m)); err != nil {
			return err
		}
		for i := 1; i < len(m); i++ {
			if bytes.Equal(p.text(p.nodes[m[i-1]].key), p.text(p.nodes[m[i]].key)) {
				return p.duplicate(p.nodes[m[i]].key)
			}
		}
	}
	return p.checkFolded(m)
}

// maxInsertionSort is the most members sortMembers sorts by insertion;
// larger objects are checked for order and sorted with slices.SortFunc.
const maxInsertionSort = 12

// pollSorted polls ctx after sorting n members, which took longer than
// reading them, when n is large.
func (p *parser) pollSorted(n int) error {
	if p.ctx == nil || n < 1024 {
		return nil
	}
	return p.ctx.Err()
}

// remove marks the value the valid non-empty pointer ptr addresses,
// starting at node n, as removed. A pointer that addresses nothing is
// ignored.
func (p *parser) remove(n int32, ptr string) {
	for ptr != "" {
		var tok string
		tok, ptr = nextToken(ptr)
		node := &p.nodes[n]
		kids := p.kids[node.kids : node.kids+node.nkid]
		next := int32(-1)
		switch node.kind {
		case kindObject:
			for _, k := range kids {
				if string(p.text(p.nodes[k].key)) == tok {
					next = k
					break
				}
			}
		case kindArray:
			if i, ok := arrayIndex(tok); ok && i < len(kids) {
				next = kids[i]
			}
		}
		if next < 0 {
			return
		}
		n = next
	}
	p.nodes[n].removed = true
}

// emit appends the canonical encoding of node n. A removed root is emitted
// as is: only members can be removed.
func (p *parser) emit(b []byte, n int32) []byte {
	node := &p.nodes[n]
	switch node.kind {
	case kindObject, kindArray:
		open, close := byte('['), byte(']')
		if node.kind == kindObject {
			open, close = '{', '}'
		}
		b = append(b, open)
		first := true
		for _, k := range p.kids[node.kids : node.kids+node.nkid] {
			if p.nodes[k].removed {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			if node.kind == kindObject {
				if key := p.nodes[k].key; key.off >= 0 {
					b = append(b, p.doc[key.off-1:key.off+key.n+1]...) // canonical already
				} else {
					b = appendQuoted(b, p.text(key))
				}
				b = append(b, ':')
			}
			if kn := &p.nodes[k]; kn.kind == kindScalar {
				b = append(b, p.text(kn.val)...)
			} else {
				b = p.emit(b, k)
			}
		}
		return append(b, close)
	default:
		return append(b, p.text(node.val)...)
	}
}
