package memory

import (
	"cmp"
	"slices"
	"unsafe"
)

// arena hands out the memory of packed records (see completed), cut from
// chunks of up to chunkSize bytes in the order the records are completed,
// instead of one allocation each.
//
// The garbage collector marks every record the table points to on every
// cycle, and marking an object means reading the metadata of its span:
// with one allocation per record, a different span for about every
// thirty records, in the random order of the table's slots, so about one
// cache miss per record per cycle. Records cut from a chunk share its
// span: a few hundred records per span, whose metadata stays in cache.
// A new key at 600,000 stored records spent about a tenth less CPU
// (docs/performance.md, "Eighth round").
//
// A record's data (its strings, header and body) is never written again
// once it is in a chunk, so records handed out may point into it; only
// its entry's flags change, under the shard's lock (see
// table.replayAt). A chunk is collected when nothing points into it any
// more: the arena keeps a chunk only until compact finds it holds no
// stored record (records handed out may still point into it, and keep
// it).
// Records are completed and expire in about the same order, so chunks
// empty whole; compact moves the few records left in a mostly empty
// chunk, so that a long-lived record cannot pin a chunk of dead ones.
type arena struct {
	cur    []byte   // the unused part of the current chunk
	chunks [][]byte // the chunks that may hold stored records, cur's included
}

const (
	// A store's first chunk is minChunk bytes, each next one twice the
	// last, up to chunkSize: a store (or a shard) that holds a few
	// records keeps a few kilobytes for them.
	minChunk  = 4 << 10
	chunkSize = 64 << 10
	// maxChunked bounds the records cut from chunks: a larger one is an
	// allocation of its own, so that a chunk's waste stays small.
	maxChunked = chunkSize / 16
)

// alloc returns n bytes of zeroed memory, aligned for a completed, that
// nothing else uses; a nil a allocates them on their own.
func (a *arena) alloc(n int) []byte {
	size := (n + 7) &^ 7 // keeps the next record aligned
	if a == nil || size > maxChunked {
		return make([]byte, n)
	}
	if len(a.cur) < size {
		n := chunkSize
		if len(a.chunks) < 4 {
			n = max(size, minChunk<<len(a.chunks))
		}
		a.cur = make([]byte, n)
		a.chunks = append(a.chunks, a.cur)
	}
	b := a.cur[:n:n]
	a.cur = a.cur[size:]
	return b
}

// packedSize returns the bytes of c's packed record: header and data.
func (c *completed) packedSize() int { return int(unsafe.Sizeof(*c)) + int(c.dataLen) }

// chunkOf returns the index in chunks (sorted by address, see compact) of
// the chunk holding the packed entry e, or -1 for a record allocated on
// its own.
func chunkOf(chunks [][]byte, e *entry) int {
	k, found := slices.BinarySearchFunc(chunks, uintptr(unsafe.Pointer(e)), func(c []byte, p uintptr) int {
		start := uintptr(unsafe.Pointer(unsafe.SliceData(c)))
		switch {
		case p < start:
			return 1
		case p >= start+uintptr(len(c)):
			return -1
		}
		return 0
	})
	if !found {
		return -1
	}
	return k
}

// compact lets go of the chunks that hold no stored record and moves the
// records out of the chunks that are mostly empty (under a quarter in
// use), then lets go of those too. It looks at every entry: the store
// calls it after a sweep, which does too.
func (t *table) compact() {
	a := &t.arena
	if len(a.chunks) < 2 {
		return // only the current chunk
	}
	current := a.chunks[len(a.chunks)-1]
	chunks := slices.Clone(a.chunks)
	slices.SortFunc(chunks, func(x, y []byte) int {
		return compareAddr(unsafe.SliceData(x), unsafe.SliceData(y))
	})
	used := make([]int, len(chunks))
	for e := range t.all() {
		if e.rec == nil { // packed
			if k := chunkOf(chunks, e); k >= 0 {
				used[k] += (e.done().packedSize() + 7) &^ 7
			}
		}
	}
	sparse := make([]bool, len(chunks))
	anySparse := false
	a.chunks = a.chunks[:0]
	for k, c := range chunks {
		switch {
		case unsafe.SliceData(c) == unsafe.SliceData(current):
			continue // kept, last
		case used[k] == 0:
		case used[k]*4 < len(c):
			sparse[k], anySparse = true, true
		default:
			a.chunks = append(a.chunks, c)
		}
	}
	a.chunks = append(a.chunks, current)
	if !anySparse {
		return
	}
	move := func(e *entry) *entry {
		if e.rec != nil {
			return e
		}
		k := chunkOf(chunks, e)
		if k < 0 || !sparse[k] {
			return e
		}
		c := e.done()
		src := unsafe.Slice((*byte)(unsafe.Pointer(c)), c.packedSize())
		dst := a.alloc(len(src))
		copy(dst, src)
		return &(*completed)(unsafe.Pointer(unsafe.SliceData(dst))).entry
	}
	for s := range t.subtables() {
		for k := range s.slots {
			sl := &s.slots[k]
			if sl.e == nil {
				continue
			}
			sl.e = move(sl.e)
			for prev := sl.e; prev.next != nil; prev = prev.next {
				prev.next = move(prev.next) // prev has a next: unpacked
			}
		}
	}
}

// compareAddr orders two pointers by address.
func compareAddr(x, y *byte) int {
	return cmp.Compare(uintptr(unsafe.Pointer(x)), uintptr(unsafe.Pointer(y)))
}
