package retrysafe

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestMidstateSum checks fingerprintBuffer.sum256 against sha256.Sum256
// on inputs of every length around the block boundaries, many sharing a
// first block with different tails (hashed from a cached midstate once the
// block is cached), and as many different first blocks as there are slots
// several times over (collisions, replacements). It also checks that the
// cache is used at all: after two misses a block must be found.
func TestMidstateSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := new(fingerprintBuffer)
	firsts := make([][]byte, 3*len(midstates))
	for i := range firsts {
		firsts[i] = make([]byte, sha256.BlockSize)
		for j := range firsts[i] {
			firsts[i][j] = byte(rng.Uint32())
		}
	}
	check := func(b []byte) {
		t.Helper()
		if got, want := buf.sum256(b), sha256.Sum256(b); got != want {
			t.Fatalf("sum256 of %d bytes = %x, want %x", len(b), got, want)
		}
	}
	for round := 0; round < 3; round++ {
		for _, first := range firsts {
			for _, n := range []int{0, 1, 54, 55, 56, 63, 64, 65, 119, 120, 128, 200, 1000} {
				b := append([]byte(nil), first...)
				for range n {
					b = append(b, byte(rng.Uint32()))
				}
				check(b)
				check(b) // twice in a row: cached now, if its slot allowed
				check(b[:n%sha256.BlockSize])
			}
		}
	}
	// A block missed twice in a row is cached.
	b := append(append([]byte(nil), firsts[0]...), "tail"...)
	check(b)
	check(b)
	slot := &midstates[0]
	found := false
	for i := range midstates {
		if m := midstates[i].m.Load(); m != nil && string(m.block[:]) == string(firsts[0]) {
			slot, found = &midstates[i], true
		}
	}
	if !found {
		t.Fatal("a first block missed twice in a row was not cached")
	}
	// A wrong state in a slot would change the sum: the cache is really
	// used (this is what the checks above rely on).
	saved := slot.m.Load()
	bad := *saved
	bad.state = append([]byte(nil), saved.state...)
	bad.state[len("sha\x03")] ^= 1
	slot.m.Store(&bad)
	if got := buf.sum256(b); got == sha256.Sum256(b) {
		t.Fatal("a corrupted midstate did not change the sum: the cache is not used")
	}
	slot.m.Store(saved)
	check(b)
}

// TestMidstateConcurrent fingerprints requests of a few routes from
// several goroutines at once (the cache's slots are shared) and checks
// each against the fingerprint computed the long way.
func TestMidstateConcurrent(t *testing.T) {
	paths := []string{"/orders", "/v1/payments/refunds", "/a", "/orders/12345/items/67890/cancel"}
	bodies := [][]byte{nil, []byte(`{"sku":"abc","qty":1}`), []byte(`{"amount":100,"currency":"EUR"}`)}
	want := map[string]string{}
	for _, p := range paths {
		for _, body := range bodies {
			want[p+string(body)] = referenceFingerprint(p, body)
		}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				p, body := paths[(g+i)%len(paths)], bodies[i%len(bodies)]
				if got := Fingerprint("POST", p, "", body, nil); got != want[p+string(body)] {
					t.Errorf("Fingerprint(%s, %s) = %s, want %s", p, body, got, want[p+string(body)])
					return
				}
			}
		})
	}
	wg.Wait()
}

// referenceFingerprint is Fingerprint for a POST without query, with the
// midstate cache bypassed: the framed input hashed with sha256.Sum256.
func referenceFingerprint(path string, body []byte) string {
	b := appendField(nil, fingerprintVersion)
	b = appendField(b, "POST")
	b = appendField(b, path)
	b = appendField(b, "query")
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	if len(body) == 0 {
		b = appendField(b, "body-empty")
		b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	} else {
		canon, err := appendCanonicalJSONContext(context.Background(), nil, body, nil)
		if err != nil {
			panic(err)
		}
		b = appendField(b, "body-json")
		b = appendField(b, string(canon))
	}
	sum := sha256.Sum256(b)
	dst := make([]byte, 2*len(sum))
	encodeHex(dst, sum[:])
	return string(dst)
}
