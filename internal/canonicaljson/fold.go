package canonicaljson

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"unicode"
	"unicode/utf8"
)

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
func (p *parser) checkFolded(m []int32) error {
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

func (p *parser) folded(a, b []byte) error {
	if bytes.Compare(a, b) > 0 {
		a, b = b, a
	}
	return fmt.Errorf("%w: %s and %s differ only in letter case, and case-insensitive decoders (encoding/json) read them as one member, in the object ending at offset %d",
		ErrDuplicateKey, appendQuoted(nil, a), appendQuoted(nil, b), p.pos)
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

func (p *parser) duplicate(key span) error {
	return fmt.Errorf("%w %s in the object ending at offset %d", ErrDuplicateKey, appendQuoted(nil, p.text(key)), p.pos)
}
