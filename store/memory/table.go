package memory

import (
	"hash/maphash"
	"iter"
	"unsafe"
)

// table holds the store's entries by (scope, key), under a seeded 64-bit
// hash of the pair; entries whose pairs share a hash are chained through
// entry.next (with a random seed, a chain longer than one is rare and
// cannot be provoked from outside).
//
// It is a hash table of its own rather than a map[uint64]*entry, for the
// two calls of every new key: a Claim looks its key up and, not finding
// it, inserts it; a Complete looks it up and replaces it. A map probes
// twice for each (its look-up, then its assignment); the table finds the
// slot once and writes it: Claim and Complete of a new key went from
// 6,810 to 5,410 instructions (callgrind), and BenchmarkNewKey ran
// 30-45 % faster.
//
// Like Go's maps, it is a directory of subtables that split, so that no
// insertion rehashes more than one subtable (at most maxSlots slots)
// while the caller holds the shard's mutex: the directory is indexed by
// the hash's top bits (depth of them), a subtable's slots by its low bits,
// with linear probing and backward-shift deletion (no tombstones).
type table struct {
	seed  maphash.Seed
	dir   []*subtable // 1 << depth of them; a subtable of local depth d appears 1 << (depth-d) times in a row
	depth uint
	n     int          // entries, chained ones included
	hc    *headerCache // for unpack; may be nil
	arena arena        // for the packed records
	// heap holds the entries that slots refer to and that are not cut
	// from the arena (see ref); nil at the indices listed in free.
	heap []*entry
	free []uint32
}

// subtable is a part of the table: the entries whose hashes start with
// its depth bits.
type subtable struct {
	slots []slot // a power of two of them
	used  int    // slots in use
	depth uint   // the leading bits of the hash shared by its entries
}

// slot is one chain of entries sharing hash h, whose first entry r
// refers to; r is 0 in a free slot.
type slot struct {
	h uint64
	r ref
}

// ref is how a slot refers to an entry, without a pointer: a packed entry
// cut from the arena by its chunk's id and its offset in it, any other
// entry (processing, unpacked, a packed record too large for a chunk) by
// its index in the table's heap.
//
// With pointers, every slot was a pointer for the garbage collector to
// follow on every cycle, one per stored record, and a cycle's work grew
// with the store. Slots without pointers are memory it never scans: what
// it marks is the chunks (one pointer each, in the arena) and the few
// entries in heap. A new key through the middleware, with 300,000 stored,
// cost 22 % less CPU, 21 % less in parallel (docs/performance.md, "Ninth
// round").
type ref uint64

// arenaRef marks a reference into the arena: the chunk's id in the bits
// from 32 (this one aside), the offset in the low 32.
const arenaRef ref = 1 << 63

// entry returns the entry r refers to; nil for 0.
func (t *table) entry(r ref) *entry {
	switch {
	case r&arenaRef != 0:
		return t.arena.entry(r)
	case r == 0:
		return nil
	}
	return t.heap[r-1]
}

// hold returns a reference to e, which becomes the first of a chain: in
// the arena, or else in heap under a free index. Release it when no slot
// holds it any more.
func (t *table) hold(e *entry) ref {
	if e.chunk != 0 {
		return t.arena.ref(e)
	}
	if k := len(t.free); k > 0 {
		i := t.free[k-1]
		t.free = t.free[:k-1]
		t.heap[i] = e
		return ref(i) + 1
	}
	t.heap = append(t.heap, e)
	return ref(len(t.heap))
}

// release lets go of r, which no slot holds any more.
func (t *table) release(r ref) {
	if r&arenaRef == 0 && r != 0 {
		t.heap[r-1] = nil
		t.free = append(t.free, uint32(r-1))
	}
}

// replace makes slot sl's chain start at e instead of where it did.
func (t *table) replace(sl *slot, e *entry) {
	t.release(sl.r)
	sl.r = t.hold(e)
}

const (
	minSlots = 8
	maxSlots = 1024 // a full subtable of this many splits instead of growing
)

func newTable() table { return newTableSeed(maphash.MakeSeed()) }

// newTableSeed returns an empty table hashing with seed.
func newTableSeed(seed maphash.Seed) table {
	return table{seed: seed, dir: []*subtable{{slots: make([]slot, minSlots)}}}
}

// hash returns the table's hash of i.
func (t *table) hash(i id) uint64 { return hashID(t.seed, i) }

// hashID returns the hash of i under seed.
func hashID(seed maphash.Seed, i id) uint64 {
	// Two seeded hashes, the scope's spread by an odd multiplier so that
	// (a, b) and (b, a) differ.
	return maphash.String(seed, i.scope)*0x9e3779b97f4a7c15 + maphash.String(seed, i.key)
}

// sub returns the subtable for hash h.
func (t *table) sub(h uint64) *subtable {
	return t.dir[h>>(64-t.depth)&(1<<t.depth-1)] // h>>64 is 0 in Go
}

// find returns the index of h's slot in s, and whether h is there: if
// not, the index is the free slot where h belongs.
func (s *subtable) find(h uint64) (int, bool) {
	mask := len(s.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		switch sl := &s.slots[i]; {
		case sl.r == 0:
			return i, false
		case sl.h == h:
			return i, true
		}
	}
}

// pos is where a hash is in the table: the slot of its chain, or the
// free slot where it would go. It is valid until the table changes.
type pos struct {
	t  *table
	h  uint64
	s  *subtable
	k  int
	ok bool // h has a chain at k
}

// at returns the position of hash h.
func (t *table) at(h uint64) pos {
	s := t.sub(h)
	k, ok := s.find(h)
	return pos{t, h, s, k, ok}
}

// get returns the entry for i at p, or nil.
func (p pos) get(i id) *entry {
	if !p.ok {
		return nil
	}
	for e := p.t.entry(p.s.slots[p.k].r); e != nil; e = e.next {
		if e.is(i) {
			return e
		}
	}
	return nil
}

// get returns the entry for i (with h = t.hash(i)), or nil.
func (t *table) get(h uint64, i id) *entry { return t.at(h).get(i) }

// putAt stores e, the entry for i (hashing to p's hash; e's next nil), in
// place of the entry for i, or adds it, at p, which must be valid. A
// packed e that would be followed by another entry of the chain is
// stored unpacked (see entry).
func (t *table) putAt(p pos, i id, e *entry) {
	s, k := p.s, p.k
	if !p.ok {
		if (s.used+1)*4 > len(s.slots)*3 { // load above 3/4
			t.grow(s, p.h)
			s = t.sub(p.h)
			k, _ = s.find(p.h)
		}
		s.slots[k] = slot{p.h, t.hold(e)}
		s.used++
		t.n++
		return
	}
	head := t.entry(s.slots[k].r)
	if head.is(i) {
		t.replace(&s.slots[k], linked(e, head.next))
		return
	}
	prev := head
	for cur := head.next; cur != nil; prev, cur = cur, cur.next {
		if cur.is(i) {
			prev.next = linked(e, cur.next) // prev has a next: not packed
			return
		}
	}
	t.replace(&s.slots[k], linked(e, head))
	t.n++
}

// linked returns e followed by next: e itself, or, when e is packed and
// next is not nil, e unpacked.
func linked(e, next *entry) *entry {
	if next == nil {
		return e
	}
	if e.rec == nil {
		e = e.unpacked(nil)
	}
	e.next = next
	return e
}

// grow makes room in s, which is full and holds hash h's slot: it doubles
// its slots, or, at maxSlots, splits it in two by the next bit of the hash
// (doubling the directory when s is as deep as it).
func (t *table) grow(s *subtable, h uint64) {
	if len(s.slots) < maxSlots {
		old := s.slots
		s.slots = make([]slot, 2*len(old))
		s.used = 0
		for _, sl := range old {
			if sl.r != 0 {
				s.insert(sl)
			}
		}
		return
	}
	if s.depth == t.depth {
		dir := make([]*subtable, 2*len(t.dir))
		for k, d := range t.dir {
			dir[2*k], dir[2*k+1] = d, d
		}
		t.dir, t.depth = dir, t.depth+1
	}
	// s's entries share their first s.depth bits; the next one picks the
	// half.
	lo := &subtable{slots: make([]slot, len(s.slots)), depth: s.depth + 1}
	hi := &subtable{slots: make([]slot, len(s.slots)), depth: s.depth + 1}
	bit := 63 - s.depth
	for _, sl := range s.slots {
		switch {
		case sl.r == 0:
		case sl.h>>bit&1 == 0:
			lo.insert(sl)
		default:
			hi.insert(sl)
		}
	}
	// s's directory entries: 1 << (t.depth - s.depth) in a row, from h's
	// entry with its last bits cleared; the first half for lo.
	run := 1 << (t.depth - s.depth)
	first := int(h>>(64-t.depth)) &^ (run - 1)
	for k := range run {
		if k < run/2 {
			t.dir[first+k] = lo
		} else {
			t.dir[first+k] = hi
		}
	}
}

// insert adds sl, whose hash s does not hold, to s, which has room.
func (s *subtable) insert(sl slot) {
	k, _ := s.find(sl.h)
	s.slots[k] = sl
	s.used++
}

// remove frees slot k of s, moving back the slots after it that probing
// would no longer reach (backward-shift deletion).
func (s *subtable) remove(k int) {
	mask := len(s.slots) - 1
	hole := k
	for j := (k + 1) & mask; s.slots[j].r != 0; j = (j + 1) & mask {
		// The slot at j may fill the hole unless its home lies
		// (cyclically) after the hole, up to j.
		home := int(s.slots[j].h) & mask
		if (j-home)&mask >= (j-hole)&mask {
			s.slots[hole] = s.slots[j]
			hole = j
		}
	}
	s.slots[hole] = slot{}
	s.used--
}

// del removes the entry for i (with h = t.hash(i)) and reports whether
// there was one.
func (t *table) del(h uint64, i id) bool {
	s := t.sub(h)
	k, ok := s.find(h)
	if !ok {
		return false
	}
	var prev *entry
	for cur := t.entry(s.slots[k].r); cur != nil; prev, cur = cur, cur.next {
		if !cur.is(i) {
			continue
		}
		switch {
		case prev != nil:
			prev.next = cur.next
		case cur.next != nil:
			t.replace(&s.slots[k], cur.next)
		default:
			t.release(s.slots[k].r)
			s.remove(k)
		}
		t.n--
		return true
	}
	return false
}

// subtables yields each subtable once.
func (t *table) subtables() iter.Seq[*subtable] {
	return func(yield func(*subtable) bool) {
		for k := 0; k < len(t.dir); k += 1 << (t.depth - t.dir[k].depth) {
			if !yield(t.dir[k]) {
				return
			}
		}
	}
}

// all yields every entry, in no particular order.
func (t *table) all() iter.Seq[*entry] {
	return func(yield func(*entry) bool) {
		for s := range t.subtables() {
			for _, sl := range s.slots {
				for e := t.entry(sl.r); e != nil; e = e.next {
					if !yield(e) {
						return
					}
				}
			}
		}
	}
}

// deleteFunc removes every entry for which drop returns true and returns
// the number removed. drop must not change the table.
func (t *table) deleteFunc(drop func(*entry) bool) int {
	n := 0
	for s := range t.subtables() {
		for k := 0; k < len(s.slots); {
			head := t.entry(s.slots[k].r)
			if head == nil {
				k++
				continue
			}
			var keep, last *entry // the chain's survivors, in order
			for e := head; e != nil; {
				next := e.next
				if drop(e) {
					n++
				} else {
					if e.next != nil { // never so for a packed e
						e.next = nil
					}
					if last == nil {
						keep = e
					} else {
						last.next = e // last had a next: not packed
					}
					last = e
				}
				e = next
			}
			if keep == nil {
				// A later slot may move into k: look at k again. A slot
				// that wraps around from the start is looked at twice,
				// which keeps what it kept.
				t.release(s.slots[k].r)
				s.remove(k)
				continue
			}
			if keep != head {
				t.replace(&s.slots[k], keep)
			}
			k++
		}
	}
	t.n -= n
	return n
}

// len returns the number of entries.
func (t *table) len() int { return t.n }

// replayAt returns the record of the completed entry e (never a
// processing one), found at p (which must be valid), for Claim or Get to
// return, with the answer a replay's Claim returns. The first time for a packed e, the record is made for
// the caller only and e is marked; the second time, e is unpacked (see
// unpackAt) and its record is the same for every later caller.
//
// A key is replayed once (a retry after a timeout) far more often than
// many times. Keeping the unpacked record from the first replay on made
// each first replay cost what a new key costs (the store grew by an
// allocation of 512 bytes that stays, and the collector marks it); made
// for one caller, the record is garbage after the reply: a first replay
// through the middleware went from 4.6–4.8 µs to 2.4 µs
// (docs/performance.md, "Eighth round").
func (t *table) replayAt(p pos, e *entry) *decoded {
	switch {
	case e.rec != nil:
	case !e.replayed:
		e.replayed = true
		return e.decodedOnce(t.hc)
	default:
		e = t.unpackAt(p, e)
	}
	return (*decoded)(unsafe.Pointer(e.rec)) // a completed entry's rec is a decoded's first field
}

// unpackAt returns the entry e, found at p (which must be valid),
// unpacked, so that it holds its record (see entry): e itself, or, for a
// packed e, its unpacked copy, which takes e's place. Claim and Get unpack
// the entry of a completed record the second time they return it (see
// replayAt), and keep it so.
func (t *table) unpackAt(p pos, e *entry) *entry {
	if e.rec != nil {
		return e
	}
	u := e.unpacked(t.hc) // e is packed: its next is nil, as u's
	s, k := p.s, p.k
	if t.entry(s.slots[k].r) == e {
		t.replace(&s.slots[k], u)
		return u
	}
	for prev := t.entry(s.slots[k].r); prev != nil; prev = prev.next {
		if prev.next == e {
			prev.next = u
			return u
		}
	}
	panic("memory: entry not in the table")
}

// head returns the first entry of h's chain, or nil. For tests.
func (t *table) head(h uint64) *entry {
	s := t.sub(h)
	k, ok := s.find(h)
	if !ok {
		return nil
	}
	return t.entry(s.slots[k].r)
}
