package memory

import (
	"fmt"
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
	if _, ok := tb.m[h]; ok {
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
	if _, ok := tb.m[0]; ok {
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
		"packed":     packedOf,
		"mixed": func(i id) *entry {
			n++
			if n%2 == 0 {
				return processingOf(i)
			}
			return packedOf(i)
		},
	} {
		t.Run(name, func(t *testing.T) { test(t, entryOf) })
	}
}

// processingOf returns a processing entry for i.
func processingOf(i id) *entry {
	return &entry{rec: &retrysafe.Record{Scope: i.scope, Key: i.key, State: retrysafe.StateProcessing, Token: retrysafe.NewToken()}}
}

// packedOf returns a packed completed entry for i.
func packedOf(i id) *entry {
	rec := &retrysafe.Record{Scope: i.scope, Key: i.key, Token: retrysafe.NewToken(), CreatedAt: base, LeaseUntil: base.Add(time.Minute)}
	e := completedEntry(rec, &retrysafe.Response{Status: 201, Body: []byte(i.key)}, base, base.Add(time.Hour), nil)
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
			tb.put(h, packedOf(i))
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
