package memory

import (
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/retrysafe/retrysafe"
)

// TestArenaCompact: records cut from chunks come back exactly; a sweep
// lets go of the chunks whose records all expired and moves the records
// left in mostly empty ones, so that a few long-lived records do not pin
// chunks of dead ones; records unpacked before the move (whose strings
// point into the old chunk) stay intact.
func TestArenaCompact(t *testing.T) {
	t.Parallel()
	s := newSharded(Config{JanitorInterval: -1}, 1) // every record in one table
	t.Cleanup(func() { s.Close() })
	sh := &s.shards[0]
	ctx := t.Context()
	const n = 3000 // about ten chunks
	long := func(k int) bool { return k%97 == 0 }
	body := func(k int) []byte { return []byte(fmt.Sprintf(`{"id":%d,"pad":"%0100d"}`, k, k)) }
	key := func(k int) string { return fmt.Sprintf("key-%05d", k) }
	for k := range n {
		p, err := claim(t, s, key(k), base)
		if err != nil {
			t.Fatal(err)
		}
		ttl := time.Hour
		if long(k) {
			ttl = 48 * time.Hour
		}
		if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: key(k), Token: p.Token, Now: base, TTL: ttl,
			Response: &retrysafe.Response{Status: 201, Body: body(k)}}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(k int, now time.Time) *retrysafe.Record {
		t.Helper()
		rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: "s", Key: key(k), Now: now})
		if err != nil {
			t.Fatalf("Get %s: %v", key(k), err)
		}
		if rec.Key != key(k) || string(rec.Response.Body) != string(body(k)) || rec.Fingerprint != "fp" {
			t.Fatalf("Get %s = %+v, body %q", key(k), rec, rec.Response.Body)
		}
		return rec
	}
	// One long-lived record returned twice before the sweep, and so
	// unpacked (see replayAt): its strings and body, and those of the
	// record made for the first call, point into its first chunk.
	once := get(0, base)
	early := get(0, base)

	sh.mu.Lock()
	before := sh.records.arena.live()
	sh.mu.Unlock()
	if before < 8 {
		t.Fatalf("%d chunks for %d records: want about ten", before, n)
	}

	later := base.Add(2 * time.Hour)
	sh.mu.Lock()
	swept := s.sweepLocked(sh, later, time.Minute)
	after := sh.records.arena.live()
	chunked, left := 0, 0
	for e := range sh.records.all() {
		if e.rec == nil {
			chunked++
			if !inChunk(&sh.records.arena, e) {
				t.Errorf("packed entry %v in no chunk of the arena", e.id())
			}
		}
		left++
	}
	sh.mu.Unlock()
	wantLeft := 0
	for k := range n {
		if long(k) {
			wantLeft++
		}
	}
	if swept != n-wantLeft || left != wantLeft {
		t.Fatalf("swept %d, %d left; want %d, %d", swept, left, n-wantLeft, wantLeft)
	}
	// 31 records of about 230 bytes: one chunk for the moved ones, and
	// the current one.
	if after > 2 {
		t.Fatalf("%d chunks after the sweep (%d before), want at most 2", after, before)
	}
	runtime.GC() // the chunks let go of are collected; early still reads its own
	for _, rec := range []*retrysafe.Record{once, early} {
		if rec.Key != key(0) || string(rec.Response.Body) != string(body(0)) {
			t.Fatalf("record returned before the move: %+v, body %q", rec, rec.Response.Body)
		}
	}
	for k := range n {
		if long(k) {
			get(k, later)
		}
	}
	if chunked != wantLeft-1 { // all but early
		t.Fatalf("%d packed entries left, want %d", chunked, wantLeft-1)
	}
}

// inChunk reports whether the packed entry e lies in the chunk its
// chunk field names.
func inChunk(a *arena, e *entry) bool {
	if e.chunk == 0 || int(e.chunk) > len(a.chunks) || a.chunks[e.chunk-1] == nil {
		return false
	}
	c := a.chunks[e.chunk-1]
	start := uintptr(unsafePointer(c))
	p := uintptr(unsafe.Pointer(e))
	return p >= start && p < start+uintptr(len(c)) && a.entry(a.ref(e)) == e
}

// TestArenaAlloc: allocations are aligned, never overlap, and a record
// too large for a chunk is allocated on its own.
func TestArenaAlloc(t *testing.T) {
	t.Parallel()
	var a arena
	var prev []byte
	for n := 1; n < 3*chunkSize/maxChunked*64; n++ {
		size := 88 + n%300
		b, chunk := a.alloc(size)
		if len(b) != size || cap(b) != size {
			t.Fatalf("alloc(%d): len %d cap %d", size, len(b), cap(b))
		}
		if addr := uintptr(unsafePointer(b)); addr%8 != 0 {
			t.Fatalf("alloc(%d) at %#x: not aligned", size, addr)
		}
		if chunk == 0 || a.chunks[chunk-1] == nil {
			t.Fatalf("alloc(%d): chunk %d", size, chunk)
		}
		if start := uintptr(unsafePointer(a.chunks[chunk-1])); uintptr(unsafePointer(b)) < start || uintptr(unsafePointer(b))+uintptr(size) > start+uintptr(len(a.chunks[chunk-1])) {
			t.Fatalf("alloc(%d): not in chunk %d", size, chunk)
		}
		for _, c := range b {
			if c != 0 {
				t.Fatalf("alloc(%d): not zeroed", size)
			}
		}
		for k := range b {
			b[k] = 0xff
		}
		if prev != nil && prev[len(prev)-1] != 0xff {
			t.Fatal("allocations overlap")
		}
		prev = b
	}
	if len(a.chunks) < 3 {
		t.Fatalf("%d chunks", len(a.chunks))
	}
	chunks := len(a.chunks)
	if b, chunk := a.alloc(maxChunked + 1); len(b) != maxChunked+1 || len(a.chunks) != chunks || chunk != 0 {
		t.Fatalf("a large record: len %d, chunk %d, chunks %d → %d", len(b), chunk, chunks, len(a.chunks))
	}
	var none *arena
	if b, chunk := none.alloc(10); len(b) != 10 || chunk != 0 {
		t.Fatalf("nil arena: len %d, chunk %d", len(b), chunk)
	}
}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
