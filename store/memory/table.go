package memory

import (
	"hash/maphash"
	"iter"
)

// table holds the store's entries by (scope, key): a map keyed by a
// seeded 64-bit hash of the pair, entries whose pairs share a hash chained
// through entry.next (with a random seed, a chain longer than one is rare
// and cannot be provoked from outside).
//
// Keyed by the strings themselves, the map would hash both strings on
// every lookup and assignment (two of each per request), compare them, and
// hash them again for every entry each time it grows; its slots would be
// five words, three of them pointers for the collector to follow. Keyed by
// the hash, a request hashes its pair once per store call and the map's
// slots are two words with one pointer; the strings live in the entry
// (its record, or its completed data).
type table struct {
	seed maphash.Seed
	m    map[uint64]*entry
	n    int         // entries, chained ones included
	hc   headerCache // for unpack
}

func newTable() table {
	return table{seed: maphash.MakeSeed(), m: make(map[uint64]*entry)}
}

// hash returns the table's hash of i.
func (t *table) hash(i id) uint64 {
	// Two seeded hashes, the scope's spread by an odd multiplier so that
	// (a, b) and (b, a) differ.
	return maphash.String(t.seed, i.scope)*0x9e3779b97f4a7c15 + maphash.String(t.seed, i.key)
}

// get returns the entry for i (with h = t.hash(i)), or nil.
func (t *table) get(h uint64, i id) *entry {
	for e := t.m[h]; e != nil; e = e.next {
		if e.is(i) {
			return e
		}
	}
	return nil
}

// put stores e (its id hashing to h, its next nil) in place of the entry
// with the same id, or adds it. A packed e that would be followed by
// another entry of the chain is stored unpacked (see entry).
func (t *table) put(h uint64, e *entry) {
	head := t.m[h]
	if head == nil {
		t.m[h] = e
		t.n++
		return
	}
	i := e.id()
	if head.is(i) {
		t.m[h] = linked(e, head.next)
		return
	}
	prev := head
	for cur := head.next; cur != nil; prev, cur = cur, cur.next {
		if cur.is(i) {
			prev.next = linked(e, cur.next) // prev has a next: not packed
			return
		}
	}
	t.m[h] = linked(e, head)
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

// unpack returns the entry e (for an id hashing to h) unpacked, so that
// it holds its record (see entry): e itself, or, for a packed e, its
// unpacked copy, which takes e's place. Claim and Get unpack the entry of
// a completed record the first time they return it, and keep it so.
func (t *table) unpack(h uint64, e *entry) *entry {
	if e.rec != nil {
		return e
	}
	u := e.unpacked(&t.hc) // e is packed: its next is nil, as u's
	if t.m[h] == e {
		t.m[h] = u
		return u
	}
	for prev := t.m[h]; prev != nil; prev = prev.next {
		if prev.next == e {
			prev.next = u
			return u
		}
	}
	panic("memory: entry not in the table")
}

// del removes the entry for i (with h = t.hash(i)) and reports whether
// there was one.
func (t *table) del(h uint64, i id) bool {
	var prev *entry
	for cur := t.m[h]; cur != nil; prev, cur = cur, cur.next {
		if !cur.is(i) {
			continue
		}
		switch {
		case prev != nil:
			prev.next = cur.next
		case cur.next != nil:
			t.m[h] = cur.next
		default:
			delete(t.m, h)
		}
		t.n--
		return true
	}
	return false
}

// all yields every entry, in no particular order.
func (t *table) all() iter.Seq[*entry] {
	return func(yield func(*entry) bool) {
		for _, head := range t.m {
			for e := head; e != nil; e = e.next {
				if !yield(e) {
					return
				}
			}
		}
	}
}

// deleteFunc removes every entry for which drop returns true and returns
// the number removed. drop must not change the table.
func (t *table) deleteFunc(drop func(*entry) bool) int {
	n := 0
	for h, head := range t.m {
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
					last.next = e
				}
				last = e
			}
			e = next
		}
		switch {
		case keep == nil:
			delete(t.m, h)
		case keep != head:
			t.m[h] = keep
		}
	}
	t.n -= n
	return n
}

// len returns the number of entries.
func (t *table) len() int { return t.n }
