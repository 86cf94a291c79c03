package memory

import (
	"fmt"
	"slices"
	"testing"

	"github.com/retrysafe/retrysafe"
)

// TestTableChains stores ids that share a hash (as two ids would after a
// collision) and checks that each is found, replaced and deleted on its
// own, wherever it sits in its chain.
func TestTableChains(t *testing.T) {
	t.Parallel()
	tb := newTable()
	const h = 7 // every id below hashes here
	ids := []id{{"s", "a"}, {"s", "b"}, {"t", "a"}, {"", "sa"}}
	for _, i := range ids {
		tb.put(h, entryOf(i))
	}
	tb.put(h+1, entryOf(id{"other", "x"}))
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
		if tb.get(h, i) != n {
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
	if n := tb.deleteFunc(drop); n != len(all)-len(want) {
		t.Fatalf("deleteFunc = %d, want %d", n, len(all)-len(want))
	}
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

// entryOf returns a processing entry for i.
func entryOf(i id) *entry {
	return &entry{rec: &retrysafe.Record{Scope: i.scope, Key: i.key, State: retrysafe.StateProcessing}}
}
