package addedcost

import (
	"flag"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
)

// The request and answer of every framework benchmark: POST /orders with
// this JSON body, an Authorization header (the scope) and a fresh or
// stored key, answered 201 with this body.
var (
	RequestBody  = []byte(`{"sku":"abc","qty":1}`)
	ResponseBody = []byte(`{"id":"ord_1"}`)
)

// Scenarios are the sub-benchmarks of [Bench]: new keys or replays of
// StoredKeys stored ones, serial or parallel.
var Scenarios = []string{"new", "replay", "new-parallel", "replay-parallel"}

// StoredKeys is how many keys the replay scenarios cycle through.
const StoredKeys = 256

// Key returns the n-th key: shaped like a UUID, which Fiber's idempotency
// middleware wants by default.
func Key(n uint64) string {
	b := []byte("00000000-0000-4000-8000-000000000000")
	s := strconv.AppendUint(nil, n, 16)
	copy(b[36-len(s):], s)
	return string(b)
}

// A Client sends the benchmark's request with key and returns the status
// code. Each goroutine has its own.
type Client func(key string) int

// Bench runs b/scenario/subject for every scenario and subject. setup
// builds the subject's handler once and returns how to make a Client for
// it; every request must be answered 201.
func Bench(b *testing.B, subjects []string, setup func(b *testing.B, subject string) func() Client) {
	for _, sc := range Scenarios {
		b.Run(sc, func(b *testing.B) {
			for _, s := range subjects {
				b.Run(s, func(b *testing.B) {
					newClient := setup(b, s)
					replay := sc == "replay" || sc == "replay-parallel"
					var next atomic.Uint64
					key := func() string {
						n := next.Add(1)
						if replay {
							n %= StoredKeys
						}
						return Key(n)
					}
					if replay {
						do := newClient()
						for n := range uint64(StoredKeys) {
							if st := do(Key(n)); st != 201 {
								b.Fatalf("storing: %d", st)
							}
						}
					}
					b.ReportAllocs()
					defer ReportCPU(b, Start())
					b.ResetTimer()
					if sc == "new" || sc == "replay" {
						do := newClient()
						for b.Loop() {
							if st := do(key()); st != 201 {
								b.Fatalf("status %d", st)
							}
						}
						return
					}
					b.RunParallel(func(pb *testing.PB) {
						do := newClient()
						for pb.Next() {
							if st := do(key()); st != 201 {
								b.Errorf("status %d", st)
								return
							}
						}
					})
				})
			}
		})
	}
}

var rounds = flag.Int("rounds", 0, "added-cost tests: interleaved rounds (0 skips them)")

// Measure runs p (its Scenarios default to [Scenarios]) in -rounds
// interleaved rounds and prints the table, or skips t without -rounds.
func Measure(t *testing.T, p Plan) {
	t.Helper()
	if *rounds <= 0 {
		t.Skip("pass -rounds N to measure")
	}
	if p.Scenarios == nil {
		p.Scenarios = Scenarios
	}
	Run(t, os.Stdout, *rounds, p)
}
