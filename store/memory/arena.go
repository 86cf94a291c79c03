package memory

import "unsafe"

// arena hands out the memory of packed records (see completed), cut from
// chunks of up to chunkSize bytes in the order the records are completed,
// instead of one allocation each.
//
// Slots refer to a record in a chunk by the chunk's id and the record's
// offset (see ref), not by a pointer: the garbage collector never looks
// at a stored record, only at the chunks, one pointer each in chunks.
// Before that, with a pointer per slot, it read the metadata of the span
// of every record on every cycle; with one allocation per record, that
// was a different span for about every thirty records, in the random
// order of the table's slots, so about one cache miss per record per
// cycle (chunks, the first step, saved a tenth of a new key's CPU at
// 600,000 stored records; pointer-free slots a fifth more:
// docs/performance.md, "Eighth round" and "Ninth round").
//
// A record's data (its strings, header and body) is never written again
// once it is in a chunk, so records handed out may point into it; only
// its entry's flags change, under the shard's lock (see
// table.replayAt). A chunk is collected when nothing points into it any
// more: the arena keeps a chunk only until compact finds it holds no
// stored record (records handed out may still point into it, and keep
// it), and its id is then free for another.
// Records are completed and expire in about the same order, so chunks
// empty whole; compact moves the few records left in a mostly empty
// chunk, so that a long-lived record cannot pin a chunk of dead ones.
type arena struct {
	cur []byte // the unused part of the current chunk
	// chunks are the chunks that may hold stored records, by id (see
	// entry.chunk); nil for an id that is free, listed in free.
	chunks [][]byte
	free   []uint32
	curID  uint32 // the current chunk's id, when there is one
}

// live returns the number of chunks a keeps.
func (a *arena) live() int { return len(a.chunks) - len(a.free) }

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
// nothing else uses, and the id + 1 of the chunk they were cut from (see
// entry.chunk); a nil a, or a large n, allocates them on their own, and
// the id is then 0.
func (a *arena) alloc(n int) ([]byte, uint32) {
	size := (n + 7) &^ 7 // keeps the next record aligned
	if a == nil || size > maxChunked {
		return make([]byte, n), 0
	}
	if len(a.cur) < size {
		n := chunkSize
		if live := a.live(); live < 4 {
			n = max(size, minChunk<<live)
		}
		a.cur = make([]byte, n)
		a.curID = a.add(a.cur)
	}
	b := a.cur[:n:n]
	a.cur = a.cur[size:]
	return b, a.curID + 1
}

// add keeps chunk c under a free id, which it returns.
func (a *arena) add(c []byte) uint32 {
	if k := len(a.free); k > 0 {
		id := a.free[k-1]
		a.free = a.free[:k-1]
		a.chunks[id] = c
		return id
	}
	a.chunks = append(a.chunks, c)
	return uint32(len(a.chunks) - 1)
}

// drop lets go of chunk id.
func (a *arena) drop(id uint32) {
	a.chunks[id] = nil
	a.free = append(a.free, id)
}

// ref returns the reference to the packed entry e, which alloc cut from
// chunk e.chunk-1 (see table).
func (a *arena) ref(e *entry) ref {
	id := e.chunk - 1
	off := uintptr(unsafe.Pointer(e)) - uintptr(unsafe.Pointer(unsafe.SliceData(a.chunks[id])))
	return arenaRef | ref(id)<<32 | ref(off)
}

// entry returns the entry that the arena reference r is to.
func (a *arena) entry(r ref) *entry {
	c := a.chunks[uint32(r>>32)&^uint32(arenaRef>>32)]
	return (*entry)(unsafe.Pointer(&c[uint32(r)]))
}

// packedSize returns the bytes of c's packed record: header and data.
func (c *completed) packedSize() int { return int(unsafe.Sizeof(*c)) + int(c.dataLen) }

// compact lets go of the chunks that hold no stored record and moves the
// records out of the chunks that are mostly empty (under a quarter in
// use), then lets go of those too. It looks at every entry: the store
// calls it after a sweep, which does too.
func (t *table) compact() {
	t.shrinkHeap()
	a := &t.arena
	if a.live() < 2 {
		return // only the current chunk
	}
	used := make([]int, len(a.chunks))
	for e := range t.all() {
		if e.chunk != 0 {
			used[e.chunk-1] += (e.done().packedSize() + 7) &^ 7
		}
	}
	sparse := make([]bool, len(a.chunks))
	anySparse := false
	for id, c := range a.chunks {
		switch {
		case c == nil || uint32(id) == a.curID:
		case used[id] == 0:
			a.drop(uint32(id))
		case used[id]*4 < len(c):
			sparse[id], anySparse = true, true
		}
	}
	if !anySparse {
		return
	}
	move := func(e *entry) *entry {
		// e was stored before this pass: its chunk's id is below len(sparse).
		if e.chunk == 0 || !sparse[e.chunk-1] {
			return e
		}
		c := e.done()
		src := unsafe.Slice((*byte)(unsafe.Pointer(c)), c.packedSize())
		dst, chunk := a.alloc(len(src))
		copy(dst, src)
		moved := &(*completed)(unsafe.Pointer(unsafe.SliceData(dst))).entry
		moved.chunk = chunk
		return moved
	}
	for s := range t.subtables() {
		for k := range s.slots {
			sl := &s.slots[k]
			if sl.r == 0 {
				continue
			}
			head := t.entry(sl.r)
			if moved := move(head); moved != head {
				sl.r = t.hold(moved)
			}
			for prev := t.entry(sl.r); prev.next != nil; prev = prev.next {
				prev.next = move(prev.next) // prev has a next: unpacked
			}
		}
	}
	for id, ok := range sparse {
		if ok {
			a.drop(uint32(id))
		}
	}
}

// minShrink is the least length of a table's heap that shrinkHeap
// shrinks.
const minShrink = 256

// shrinkHeap renumbers the entries held in heap when most of its indices
// are free, so that a burst of processing or unpacked entries does not
// leave a large slice behind, which the collector would scan on every
// cycle. It looks at every slot: compact calls it.
func (t *table) shrinkHeap() {
	if len(t.heap) < minShrink || 2*len(t.free) < len(t.heap) {
		return
	}
	heap := make([]*entry, 0, len(t.heap)-len(t.free))
	for s := range t.subtables() {
		for k := range s.slots {
			sl := &s.slots[k]
			if sl.r == 0 || sl.r&arenaRef != 0 {
				continue
			}
			heap = append(heap, t.heap[sl.r-1])
			sl.r = ref(len(heap))
		}
	}
	t.heap, t.free = heap, nil
}
