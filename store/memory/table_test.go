package memory

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// TestTableChains stores ids that share a hash (as two ids would after a
// collision) and checks that each is found, replaced and deleted on its
// own, wherever it sits in its chain.
func TestTableChains(t *testing.T) {
	t.Parallel()
	forEachKind(t, testTableChains)
}

func testTableChains(t *testing.T, entryOf func(id) *entry) {
	tb := newTable()
	const h = 7 // every id below hashes here
	ids := []id{{"s", "a"}, {"s", "b"}, {"t", "a"}, {"", "sa"}}
	for _, i := range ids {
		tb.put(h, entryOf(i))
	}
	tb.put(h+1, entryOf(id{"other", "x"}))
	checkPacked(t, &tb)
	if tb.len() != 5 {
		t.Fatalf("len = %d, want 5", tb.len())
	}
	for _, i := range ids {
		if e := tb.get(h, i); e == nil || e.id() != i {
			t.Fatalf("get(%v) = %v", i, e)
		}
	}
	if e := tb.get(h, id{"s", "c"}); e != nil {
		t.Fatalf("get of an absent id in a chain = %v", e)
	}

	// Replace each one: the chain keeps every other entry and its length.
	for _, i := range ids {
		n := entryOf(i)
		tb.put(h, n)
		// n, or its unpacked copy (a packed entry with a next)
		if got := tb.get(h, i); got != n && (n.rec != nil || got.view().Token != n.view().Token) {
			t.Fatalf("after replacing %v, get returns the old entry", i)
		}
		if tb.len() != 5 {
			t.Fatalf("len after replacing %v = %d, want 5", i, tb.len())
		}
		for _, j := range ids {
			if tb.get(h, j) == nil {
				t.Fatalf("after replacing %v, %v is lost", i, j)
			}
		}
		checkPacked(t, &tb)
	}

	// Delete from the middle, the head and the tail.
	for k, i := range []id{ids[1], ids[3], ids[0], ids[2]} {
		if !tb.del(h, i) {
			t.Fatalf("del(%v) = false", i)
		}
		if tb.del(h, i) {
			t.Fatalf("second del(%v) = true", i)
		}
		if tb.get(h, i) != nil {
			t.Fatalf("%v found after del", i)
		}
		if want := 4 - k; tb.len() != want {
			t.Fatalf("len = %d, want %d", tb.len(), want)
		}
		checkPacked(t, &tb)
	}
	if tb.head(h) != nil {
		t.Fatal("an emptied chain stays in the map")
	}
	if tb.get(h+1, id{"other", "x"}) == nil {
		t.Fatal("the entry of another hash is lost")
	}
}

// TestTableDeleteFunc drops some entries of long chains and of single
// ones and checks what remains.
func TestTableDeleteFunc(t *testing.T) {
	t.Parallel()
	forEachKind(t, testTableDeleteFunc)
}

func testTableDeleteFunc(t *testing.T, entryOf func(id) *entry) {
	tb := newTable()
	var all []id
	for h := range uint64(4) {
		for n := range int(h) + 1 { // chains of 1 to 4
			i := id{"s", fmt.Sprintf("%d-%d", h, n)}
			all = append(all, i)
			tb.put(h, entryOf(i))
		}
	}
	drop := func(e *entry) bool { return e.id().key[len(e.id().key)-1]%2 == 0 } // n even
	var want []id
	for _, i := range all {
		if !drop(entryOf(i)) {
			want = append(want, i)
		}
	}
	checkPacked(t, &tb)
	if n := tb.deleteFunc(drop); n != len(all)-len(want) {
		t.Fatalf("deleteFunc = %d, want %d", n, len(all)-len(want))
	}
	checkPacked(t, &tb)
	var got []id
	for e := range tb.all() {
		got = append(got, e.id())
	}
	slices.SortFunc(got, compareID)
	slices.SortFunc(want, compareID)
	if !slices.Equal(got, want) || tb.len() != len(want) {
		t.Fatalf("left %v (len %d), want %v", got, tb.len(), want)
	}
	for h := range uint64(4) {
		for _, i := range all {
			if e := tb.get(h, i); e != nil && drop(e) {
				t.Fatalf("%v still found", i)
			}
		}
	}
	if tb.head(0) != nil {
		t.Fatal("a chain left empty stays in the map")
	}
}

// TestTableHash: the hash depends on which string is the scope.
func TestTableHash(t *testing.T) {
	t.Parallel()
	tb := newTable()
	if tb.hash(id{"a", "b"}) == tb.hash(id{"b", "a"}) {
		t.Fatal("hash(a, b) == hash(b, a)")
	}
	if tb.hash(id{"a", "b"}) != tb.hash(id{"a", "b"}) {
		t.Fatal("hash is not a function of the id")
	}
}

// forEachKind runs test with processing entries, packed completed ones,
// and the two mixed.
func forEachKind(t *testing.T, test func(*testing.T, func(id) *entry)) {
	n := 0
	for name, entryOf := range map[string]func(id) *entry{
		"processing": processingOf,
		"packed":     func(i id) *entry { return packedOf(i, nil) },
		"mixed": func(i id) *entry {
			n++
			if n%2 == 0 {
				return processingOf(i)
			}
			return packedOf(i, nil)
		},
	} {
		t.Run(name, func(t *testing.T) { test(t, entryOf) })
	}
}

// processingOf returns a processing entry for i.
func processingOf(i id) *entry {
	return &entry{rec: &retrysafe.Record{Scope: i.scope, Key: i.key, State: retrysafe.StateProcessing, Token: retrysafe.NewToken()}}
}

// packedOf returns a packed completed entry for i, cut from a (see
// arena.alloc).
func packedOf(i id, a *arena) *entry {
	rec := &retrysafe.Record{Scope: i.scope, Key: i.key, Token: retrysafe.NewToken(), CreatedAt: base, LeaseUntil: base.Add(time.Minute)}
	e := completedEntry(rec, &retrysafe.Response{Status: 201, Body: []byte(i.key)}, base, base.Add(time.Hour), nil, a)
	if e.rec != nil {
		panic("packedOf: not packed")
	}
	return e
}

// checkPacked fails if a packed entry of tb has a next: the collector
// does not see it (see entry).
func checkPacked(t *testing.T, tb *table) {
	t.Helper()
	for e := range tb.all() {
		if e.rec == nil && e.next != nil {
			t.Fatalf("packed entry %v has a next", e.id())
		}
	}
}

// checkRefs fails unless every entry of tb.heap is referred to by exactly
// one slot and every other index is free, once, and every arena reference
// is to the packed entry it was made for.
func checkRefs(t *testing.T, tb *table) {
	t.Helper()
	held := make([]int, len(tb.heap))
	for s := range tb.subtables() {
		for _, sl := range s.slots {
			switch {
			case sl.r == 0:
			case sl.r&arenaRef != 0:
				if e := tb.entry(sl.r); e.chunk == 0 || tb.arena.ref(e) != sl.r || !inChunk(&tb.arena, e) {
					t.Fatalf("arena reference %x to an entry of chunk %d", sl.r, e.chunk)
				}
			default:
				if e := tb.heap[sl.r-1]; e == nil || e.chunk != 0 {
					t.Fatalf("reference %d to %v", sl.r, e)
				}
				held[sl.r-1]++
			}
		}
	}
	free := make([]int, len(tb.heap))
	for _, k := range tb.free {
		free[k]++
	}
	for k := range held {
		if held[k]+free[k] != 1 || (free[k] == 1) != (tb.heap[k] == nil) {
			t.Fatalf("heap[%d]: %d slots refer to it, free %d times, nil %v", k, held[k], free[k], tb.heap[k] == nil)
		}
	}
}

// TestTableUnpack: unpacking a packed entry, alone or at the head, middle
// or tail of a chain, puts its unpacked copy in its place, holding the same
// record, and leaves the rest of the chain as it was.
func TestTableUnpack(t *testing.T) {
	t.Parallel()
	for pos := range 4 { // alone, then head, middle, tail of a chain of 3
		tb := newTable()
		const h = 3
		ids := []id{{"s", "0"}, {"s", "1"}, {"s", "2"}}
		if pos == 0 {
			ids = ids[:1]
		}
		for _, i := range ids {
			tb.put(h, packedOf(i, nil))
		}
		target := ids[0]
		switch pos {
		case 1:
			target = ids[len(ids)-1] // put last: the head
		case 2:
			target = ids[1]
		case 3:
			target = ids[0] // put first: the tail, the only packed one
		}
		e := tb.get(h, target)
		if pos == 3 && e.rec != nil {
			t.Fatalf("the tail of a chain is not packed")
		}
		u := tb.unpack(h, e)
		if u.rec == nil || u.rec.Key != target.key || string(u.rec.Response.Body) != target.key || u.done() == nil {
			t.Fatalf("pos %d: unpacked %+v", pos, u.rec)
		}
		if tb.get(h, target) != u || tb.unpack(h, u) != u {
			t.Fatalf("pos %d: the unpacked entry is not in the table in place of the packed one", pos)
		}
		for _, i := range ids {
			if e := tb.get(h, i); e == nil || e.view().Key != i.key {
				t.Fatalf("pos %d: %v lost after unpacking %v", pos, i, target)
			}
		}
		if tb.len() != len(ids) {
			t.Fatalf("pos %d: len %d, want %d", pos, tb.len(), len(ids))
		}
		checkPacked(t, &tb)
	}
}

// TestTableModel runs random puts, deletes, look-ups, unpackings and
// sweeps against a map, with hashes that are random (many subtables and
// splits), that collide (chains), and that share their low bits (long
// probe runs, shifted back on deletion), and checks the table against the
// map and its own invariants throughout.
func TestTableModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ids  int
		ops  int
		hash func(rng *rand.Rand, n int) uint64
	}{
		{"random", 4000, 30000, func(rng *rand.Rand, _ int) uint64 { return rng.Uint64() }},
		{"colliding", 400, 20000, func(_ *rand.Rand, n int) uint64 { return uint64(n%23) * 0x9e3779b97f4a7c15 }},
		{"same low bits", 1200, 12000, func(rng *rand.Rand, _ int) uint64 { return rng.Uint64()&^0xffff | 0x1234 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(len(tc.name)), 7))
			ids := make([]id, tc.ids)
			hashes := make(map[id]uint64, tc.ids)
			for n := range ids {
				ids[n] = id{"s", fmt.Sprint(n)}
				hashes[ids[n]] = tc.hash(rng, n)
			}
			tb := newTable()
			model := map[id]string{} // id -> token of its entry
			for op := range tc.ops {
				i := ids[rng.IntN(len(ids))]
				h := hashes[i]
				switch r := rng.IntN(100); {
				case r < 60:
					e := processingOf(i)
					switch rng.IntN(4) {
					case 0:
						e = packedOf(i, nil) // on its own, held in heap
					case 1, 2:
						e = packedOf(i, &tb.arena)
					}
					tb.put(h, e)
					model[i] = e.view().Token
				case r < 80:
					_, had := model[i]
					if got := tb.del(h, i); got != had {
						t.Fatalf("op %d: del(%v) = %v, want %v", op, i, got, had)
					}
					delete(model, i)
				case r < 99:
					if e := tb.get(h, i); e != nil {
						u := tb.unpack(h, e)
						if u.rec == nil || u.view().Token != model[i] || tb.get(h, i) != u {
							t.Fatalf("op %d: unpack(%v) = %+v", op, i, u.rec)
						}
					}
				default:
					cut := rng.IntN(len(ids))
					drop := func(e *entry) bool { return hashes[e.id()]%97 == uint64(cut%97) }
					want := 0
					for j := range model {
						if drop(&entry{rec: &retrysafe.Record{Scope: j.scope, Key: j.key}}) {
							delete(model, j)
							want++
						}
					}
					if n := tb.deleteFunc(drop); n != want {
						t.Fatalf("op %d: deleteFunc = %d, want %d", op, n, want)
					}
				}
				if op%2999 == 0 || op == tc.ops-1 {
					// Only the table refers to its entries: a collection
					// must keep every one (see ref). Compaction moves
					// records and renumbers heap.
					if op%(3*2999) == 0 {
						tb.compact()
					}
					runtime.GC()
					checkModel(t, &tb, model, hashes)
				}
			}
			if tc.name == "random" && tb.depth < 2 {
				t.Fatalf("directory depth %d: the run never split a subtable", tb.depth)
			}
		})
	}
}

// checkModel fails unless tb holds exactly model's entries (by token),
// each found under its hash, with its subtables consistent.
func checkModel(t *testing.T, tb *table, model map[id]string, hashes map[id]uint64) {
	t.Helper()
	checkPacked(t, tb)
	checkRefs(t, tb)
	if tb.len() != len(model) {
		t.Fatalf("len = %d, want %d", tb.len(), len(model))
	}
	seen := 0
	for e := range tb.all() {
		i := e.id()
		if tok, ok := model[i]; !ok || e.view().Token != tok {
			t.Fatalf("table holds %v (token %q), model %q (%v)", i, e.view().Token, tok, ok)
		}
		seen++
	}
	if seen != len(model) {
		t.Fatalf("all yields %d entries, want %d", seen, len(model))
	}
	for i, tok := range model {
		if e := tb.get(hashes[i], i); e == nil || e.view().Token != tok {
			t.Fatalf("get(%v) = %v, want token %q", i, e, tok)
		}
	}
	subs := 0
	for s := range tb.subtables() {
		subs++
		used := 0
		for k, sl := range s.slots {
			if sl.r == 0 {
				continue
			}
			used++
			if s.depth > 0 && tb.sub(sl.h) != s {
				t.Fatalf("slot %d of a subtable of depth %d holds hash %x of another", k, s.depth, sl.h)
			}
			if at, ok := s.find(sl.h); !ok || at != k {
				t.Fatalf("hash %x in slot %d found at %d (%v)", sl.h, k, at, ok)
			}
		}
		if used != s.used || used*4 > len(s.slots)*3 {
			t.Fatalf("subtable: %d slots used, counted %d, of %d", used, s.used, len(s.slots))
		}
	}
	if len(tb.dir) != 1<<tb.depth {
		t.Fatalf("directory of %d at depth %d", len(tb.dir), tb.depth)
	}
}

// put stores e at h's position (see putAt).
func (t *table) put(h uint64, e *entry) { t.putAt(t.at(h), e.id(), e) }

// unpack unpacks e at h's position (see unpackAt).
func (t *table) unpack(h uint64, e *entry) *entry { return t.unpackAt(t.at(h), e) }

// TestShrinkHeap: once most of the entries held in heap are gone,
// compact renumbers the rest into a slice of their size; every entry is
// still found, and its slot refers to it alone.
func TestShrinkHeap(t *testing.T) {
	t.Parallel()
	tb := newTable()
	const n = 3 * minShrink
	ids := make([]id, n)
	for k := range ids {
		ids[k] = id{"s", fmt.Sprint(k)}
		tb.put(tb.hash(ids[k]), processingOf(ids[k]))
	}
	if len(tb.heap) != n {
		t.Fatalf("heap of %d for %d processing entries", len(tb.heap), n)
	}
	tb.compact()
	if len(tb.heap) != n {
		t.Fatalf("heap of %d, all in use, shrank to %d", n, len(tb.heap))
	}
	kept := map[id]string{}
	for k, i := range ids {
		h := tb.hash(i)
		if k%5 != 0 {
			tb.del(h, i)
			continue
		}
		kept[i] = tb.get(h, i).rec.Token
	}
	tb.compact()
	if len(tb.heap) != len(kept) || len(tb.free) != 0 {
		t.Fatalf("heap of %d (%d free) for %d entries", len(tb.heap), len(tb.free), len(kept))
	}
	runtime.GC()
	checkRefs(t, &tb)
	for i, tok := range kept {
		if e := tb.get(tb.hash(i), i); e == nil || e.rec.Token != tok {
			t.Fatalf("%v: %v after the shrink", i, e)
		}
	}
	e := processingOf(id{"s", "new"})
	tb.put(tb.hash(id{"s", "new"}), e)
	if tb.get(tb.hash(id{"s", "new"}), id{"s", "new"}) != e {
		t.Fatal("an entry put after the shrink is not found")
	}
	checkRefs(t, &tb)
}
