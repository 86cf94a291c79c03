package retrysafe

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting of objects and arrays CanonicalJSON accepts.
const maxJSONDepth = 1000

// errDuplicateKey is wrapped by CanonicalJSON's error for an object that
// names the same member twice.
var errDuplicateKey = errors.New("duplicate object key")

// canonicalJSON returns a canonical encoding of the JSON document doc (RFC
// 8259), so that documents that mean the same thing encode to the same bytes:
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
// CanonicalJSON returns an error if doc is not exactly one JSON value
// (trailing data is an error), if a string holds invalid UTF-8, if an object
// has two members with the same decoded name (the document is ambiguous) or
// with names that encoding/json would match to one struct field (equal under
// simple Unicode case folding as in [strings.EqualFold], a lone surrogate
// read as U+FFFD: {"amount":1,"Amount":1000} means 1000 to such a decoder
// and {"Amount":1000,"amount":1} means 1, so they must not share a
// canonical form), if
// objects and arrays nest deeper than 1000 levels, or if an ignore entry is not
// a valid JSON Pointer (see [ValidatePointer]). It does not panic on any input.
func canonicalJSON(doc []byte, ignore []string) ([]byte, error) {
	return appendCanonicalJSON(make([]byte, 0, len(doc)), doc, ignore)
}

// appendCanonicalJSON appends the canonical encoding of doc to dst.
func appendCanonicalJSON(dst, doc []byte, ignore []string) ([]byte, error) {
	return appendCanonicalJSONContext(context.Background(), dst, doc, ignore)
}

// pollEvery is how many bytes of input the parser reads between checks of
// its context.
const pollEvery = 64 << 10

// appendCanonicalJSONContext is appendCanonicalJSON that stops, with an
// error wrapping ctx.Err(), once ctx ends. It checks ctx every pollEvery
// bytes of input (between values and inside strings) and after sorting a
// large object; every step in between is linear in the input it reads, so
// it stops after at most about pollEvery more bytes of work.
func appendCanonicalJSONContext(ctx context.Context, dst, doc []byte, ignore []string) ([]byte, error) {
	p := parserPool.Get().(*canonParser)
	defer func() {
		if p.trim() {
			parserPool.Put(p)
		}
	}()
	return p.appendCanonical(ctx, dst, doc, ignore)
}

// appendCanonical is appendCanonicalJSONContext on p's buffers. Call
// p.trim afterwards, before p is kept for another call.
func (p *canonParser) appendCanonical(ctx context.Context, dst, doc []byte, ignore []string) ([]byte, error) {
	if len(doc) > maxJSONSize {
		return nil, fmt.Errorf("retrysafe: canonical json: document of %d bytes is larger than %d", len(doc), maxJSONSize)
	}
	if n, ok := p.parseFlat(doc); ok {
		// A small flat object (canonicaljson_flat.go): the same output
		// without the tree.
		if err := validatePointers(ignore); err != nil {
			return nil, err
		}
		m := p.flat[:n]
		removeFlat(doc, m, ignore)
		return p.appendFlat(dst, m), nil
	}
	return p.appendCanonicalTree(ctx, dst, doc, ignore)
}

// appendCanonicalTree is appendCanonical without its fast path for flat
// objects: it parses doc into a tree, removes the ignored members and
// writes the tree out.
func (p *canonParser) appendCanonicalTree(ctx context.Context, dst, doc []byte, ignore []string) ([]byte, error) {
	p.reset(doc)
	if ctx.Done() != nil {
		p.ctx, p.nextPoll = ctx, pollEvery
	}
	root, err := p.parseDocument()
	if err != nil {
		return nil, fmt.Errorf("retrysafe: canonical json: %w", err)
	}
	if err := validatePointers(ignore); err != nil {
		return nil, err
	}
	for _, ptr := range ignore {
		if ptr != "" {
			p.remove(root, pointerTokens(ptr))
		}
	}
	return p.emit(dst, root), nil
}

// validatePointers returns the error of the first invalid pointer in
// ignore.
func validatePointers(ignore []string) error {
	for _, ptr := range ignore {
		if err := ValidatePointer(ptr); err != nil {
			return err
		}
	}
	return nil
}

// parserPool recycles parsers and their buffers between calls.
var parserPool = sync.Pool{New: func() any { return new(canonParser) }}

func (p *canonParser) reset(doc []byte) {
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
func (p *canonParser) trim() bool {
	p.doc, p.ctx = nil, nil
	return cap(p.nodes) <= 1<<15 && cap(p.kids) <= 1<<15 && cap(p.scratch) <= 1<<18 && cap(p.stack) <= 1<<12 && cap(p.folds) <= 1<<12
}

// ValidatePointer reports whether p is a syntactically valid JSON Pointer
// (RFC 6901): either "" (the whole document) or a sequence of reference
// tokens, each prefixed by '/', in which '~' appears only in the escapes ~0
// ('~') and ~1 ('/'). p must be valid UTF-8.
func ValidatePointer(p string) error {
	if p == "" {
		return nil
	}
	if p[0] != '/' {
		return fmt.Errorf("retrysafe: invalid JSON pointer %q: must be empty or start with '/'", p)
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("retrysafe: invalid JSON pointer %q: not valid UTF-8", p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] != '~' {
			continue
		}
		if i+1 >= len(p) || (p[i+1] != '0' && p[i+1] != '1') {
			return fmt.Errorf("retrysafe: invalid JSON pointer %q: '~' at position %d must be followed by 0 or 1 (~0 is '~', ~1 is '/')", p, i)
		}
		i++
	}
	return nil
}

// pointerTokens splits a valid non-empty pointer into its unescaped
// reference tokens.
func pointerTokens(p string) []string {
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		if strings.IndexByte(t, '~') >= 0 {
			toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
		}
	}
	return toks
}

const (
	kindScalar uint8 = iota
	kindObject
	kindArray
)

// maxJSONSize bounds the documents CanonicalJSON accepts, so that offsets
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
	kids, nkid int32 // children: canonParser.kids[kids : kids+nkid]
	kind       uint8
	removed    bool
}

// canonParser parses a document into a tree of jnodes. Strings that need no
// re-encoding, literals and plain integers are referenced in doc; everything
// else is written once to scratch, which is only ever appended to.
type canonParser struct {
	doc     []byte
	pos     int
	depth   int
	nodes   []jnode
	kids    []int32 // children of all objects and arrays, one run each
	stack   []int32 // children of the objects and arrays being parsed
	scratch []byte
	digits  []byte                     // a number's significant digits, reused
	folds   []foldEntry                // for checkFolded, reused
	flat    [maxFlatMembers]flatMember // for parseFlat, reused

	// ctx is the context of the current call, checked by poll once pos
	// reaches nextPoll; nil (and nextPoll MaxInt) when it cannot end.
	ctx      context.Context
	nextPoll int
}

// poll returns ctx's error if it has ended, checking it only once pos
// reaches nextPoll.
func (p *canonParser) poll(pos int) error {
	if pos < p.nextPoll {
		return nil
	}
	p.nextPoll = pos + pollEvery
	return p.ctx.Err()
}

// text returns the bytes s locates.
func (p *canonParser) text(s span) []byte {
	if s.off >= 0 {
		return p.doc[s.off : s.off+s.n : s.off+s.n]
	}
	off := ^s.off
	return p.scratch[off : off+s.n : off+s.n]
}

// scratchSince returns the span of scratch written since offset start.
func (p *canonParser) scratchSince(start int) span {
	return span{^int32(start), int32(len(p.scratch) - start)}
}

func (p *canonParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%s at offset %d", fmt.Sprintf(format, args...), p.pos)
}

func (p *canonParser) skipSpace() {
	for p.pos < len(p.doc) {
		switch p.doc[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *canonParser) parseDocument() (int32, error) {
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

func (p *canonParser) newNode(kind uint8) int32 {
	p.nodes = append(p.nodes, jnode{kind: kind})
	return int32(len(p.nodes) - 1)
}

func (p *canonParser) parseValue() (int32, error) {
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

func (p *canonParser) parseLiteral(lit string) (int32, error) {
	if !bytes.HasPrefix(p.doc[p.pos:], []byte(lit)) {
		return 0, p.errorf("invalid literal, expecting %s", lit)
	}
	n := p.newNode(kindScalar)
	p.nodes[n].val = span{int32(p.pos), int32(len(lit))}
	p.pos += len(lit)
	return n, nil
}

func (p *canonParser) enter() error {
	p.depth++
	if p.depth > maxJSONDepth {
		return p.errorf("objects and arrays nested deeper than %d levels", maxJSONDepth)
	}
	return nil
}

// finish stores the children pushed on the stack since base as node n's.
func (p *canonParser) finish(n int32, base int) {
	kids := p.stack[base:]
	p.nodes[n].kids = int32(len(p.kids))
	p.nodes[n].nkid = int32(len(kids))
	p.kids = append(p.kids, kids...)
	p.stack = p.stack[:base]
	p.depth--
}

func (p *canonParser) parseArray() (int32, error) {
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

func (p *canonParser) parseObject() (int32, error) {
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
func (p *canonParser) sortMembers(base int) error {
	m := p.stack[base:]
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

// pollSorted polls ctx after sorting n members, which took longer than
// reading them, when n is large.
func (p *canonParser) pollSorted(n int) error {
	if p.ctx == nil || n < 1024 {
		return nil
	}
	return p.ctx.Err()
}

// maxPairwiseFold is the most members an object may have for checkFolded to
// compare every pair of names; larger objects are sorted by folded name.
const maxPairwiseFold = 12

// checkFolded rejects an object two of whose member names are equal to a
// case-insensitive decoder: encoding/json matches names to struct fields
// under simple Unicode case folding (bytes.EqualFold), the last match
// winning, and reads a lone surrogate as U+FFFD. {"amount":1,"Amount":1000}
// and {"Amount":1000,"amount":1} would otherwise share a canonical form
// while such a decoder reads 1000 from one and 1 from the other. The names
// of m are distinct.
func (p *canonParser) checkFolded(m []int32) error {
	if len(m) <= maxPairwiseFold {
		// Compare the hashes of every pair, and the names of a pair only
		// when they hash alike.
		var hashes [maxPairwiseFold]uint64
		for i, k := range m {
			hashes[i] = foldHash(p.text(p.nodes[k].key))
			for j := range i {
				if hashes[j] != hashes[i] {
					continue
				}
				a, b := p.text(p.nodes[m[j]].key), p.text(p.nodes[k].key)
				if foldEqual(a, b) {
					return p.folded(a, b)
				}
			}
		}
		return nil
	}
	// Sorting by the hash of the folded name, then by the folded name,
	// brings names that fold alike together. Names that collide in the
	// hash (an attacker can make them) cost a name comparison each, as in
	// the member sort, so an object costs at most twice what sorting it
	// already costs, whatever its names.
	p.folds = p.folds[:0]
	for _, k := range m {
		p.folds = append(p.folds, foldEntry{foldHash(p.text(p.nodes[k].key)), k})
	}
	slices.SortFunc(p.folds, func(a, b foldEntry) int {
		if c := cmp.Compare(a.hash, b.hash); c != 0 {
			return c
		}
		return foldCompare(p.text(p.nodes[a.node].key), p.text(p.nodes[b.node].key))
	})
	if err := p.pollSorted(len(m)); err != nil {
		return err
	}
	for i := 1; i < len(p.folds); i++ {
		x, y := p.folds[i-1], p.folds[i]
		if x.hash != y.hash {
			continue
		}
		if a, b := p.text(p.nodes[x.node].key), p.text(p.nodes[y.node].key); foldEqual(a, b) {
			return p.folded(a, b)
		}
	}
	return nil
}

// foldEntry is a member and the hash of its folded name, for checkFolded.
type foldEntry struct {
	hash uint64
	node int32
}

func (p *canonParser) folded(a, b []byte) error {
	if bytes.Compare(a, b) > 0 {
		a, b = b, a
	}
	return fmt.Errorf("%w: %s and %s differ only in letter case, and case-insensitive decoders (encoding/json) read them as one member, in the object ending at offset %d",
		errDuplicateKey, appendQuoted(nil, a), appendQuoted(nil, b), p.pos)
}

// nextFolded returns the rune of the decoded name s at i as encoding/json
// compares names, and the index after it: ASCII letters upper-cased, other
// runes mapped to the smallest rune of their simple case folding orbit, and
// a lone surrogate (kept by appendRune3, the only invalid UTF-8 a decoded
// name can hold) read as U+FFFD.
func nextFolded(s []byte, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		return rune(c), i + 1
	}
	r, size := utf8.DecodeRune(s[i:])
	if r == utf8.RuneError && size == 1 {
		return utf8.RuneError, min(i+3, len(s))
	}
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2, i + size
		}
		r = r2
	}
}

// foldHash is an FNV-1a hash of the runes of name as nextFolded reads them:
// names that are foldEqual hash alike.
func foldHash(name []byte) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); {
		c := name[i]
		if c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			h = (h ^ uint64(c)) * prime
			i++
			continue
		}
		var r rune
		r, i = nextFolded(name, i)
		h = (h ^ uint64(r)) * prime
	}
	return h
}

// foldEqual reports whether a and b are one name to encoding/json.
func foldEqual(a, b []byte) bool { return foldCompare(a, b) == 0 }

// foldCompare compares a and b rune by rune as nextFolded reads them.
func foldCompare(a, b []byte) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i] == b[j] && a[i] < utf8.RuneSelf {
			i, j = i+1, j+1
			continue
		}
		var ra, rb rune
		ra, i = nextFolded(a, i)
		rb, j = nextFolded(b, j)
		if ra != rb {
			return cmp.Compare(ra, rb)
		}
	}
	return cmp.Compare(len(a)-i, len(b)-j)
}

func (p *canonParser) duplicate(key span) error {
	return fmt.Errorf("%w %s in the object ending at offset %d", errDuplicateKey, appendQuoted(nil, p.text(key)), p.pos)
}

// parseString parses the string at p.pos (a '"') and returns the decoded
// string. The span is in doc exactly when the string needed no decoding; its
// quoted source text is then also its canonical encoding.
func (p *canonParser) parseString() (span, error) {
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
			// The plain bytes that follow, short of where poll would
			// next check: poll(i) does nothing for them.
			i = plainEnd(p.doc[:min(len(p.doc), p.nextPoll)], i+1)
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

// plainASCII reports the bytes that stand for themselves in a JSON string
// and in its canonical encoding: ASCII other than '"', '\' and the
// control characters.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// plainEnd returns the index of the first byte of b at or after i that is
// not plainASCII, or len(b).
func plainEnd(b []byte, i int) int {
	for i+8 <= len(b) {
		if m := notPlain(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	if i < len(b) && len(b) >= 8 {
		// Fewer than eight bytes left: the last word of b, shifted so
		// that they come first and zero bytes (not plain) follow.
		m := notPlain(binary.LittleEndian.Uint64(b[len(b)-8:]) >> (8 * (i - (len(b) - 8))))
		return min(i+bits.TrailingZeros64(m)>>3, len(b))
	}
	for i < len(b) && plainASCII[b[i]] {
		i++
	}
	return i
}

// notPlain returns a word whose lowest set bit is the high bit of the
// first (lowest) byte of w that is not plainASCII: below 0x20, from 0x80
// up, '"' or '\\'; 0 when all are. Each test is the usual "has a byte less
// than / equal to" bit trick, whose carries and borrows may spoil the bits
// above a matching byte but never those of the first.
func notPlain(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	below := (w - 0x20*ones) &^ w // a byte < 0x20
	q, s := w^('"'*ones), w^('\\'*ones)
	equal := (q-ones)&^q | (s-ones)&^s // a byte equal to '"' or '\\'
	return (below | equal | w) & highs
}

// parseStringSlow decodes the string starting at start whose first i-start
// bytes need no decoding.
func (p *canonParser) parseStringSlow(start, i int) (span, error) {
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

// parseNumber parses the number at p.pos and returns its canonical form.
func (p *canonParser) parseNumber() (span, error) {
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
func (p *canonParser) digitsEnd(i int) (int, error) {
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

// remove marks the value addressed by the reference tokens toks, starting
// at node n, as removed. Tokens that address nothing are ignored.
func (p *canonParser) remove(n int32, toks []string) {
	for _, tok := range toks {
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

// arrayIndex parses an RFC 6901 array index: 0 or digits without a leading
// zero.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 9 || (tok[0] == '0' && len(tok) > 1) {
		return 0, false
	}
	i := 0
	for j := 0; j < len(tok); j++ {
		c := tok[j]
		if c < '0' || c > '9' {
			return 0, false
		}
		i = i*10 + int(c-'0')
	}
	return i, true
}

// emit appends the canonical encoding of node n. A removed root is emitted
// as is: only members can be removed.
func (p *canonParser) emit(b []byte, n int32) []byte {
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
			b = p.emit(b, k)
		}
		return append(b, close)
	default:
		return append(b, p.text(node.val)...)
	}
}
