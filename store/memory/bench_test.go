package memory

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/cputime"
)

// BenchmarkGetCompleted: Get of a completed record, the first time and
// again (after two Gets of it), over a store holding b.N of them.
func BenchmarkGetCompleted(b *testing.B) {
	for _, again := range []bool{false, true} {
		b.Run(map[bool]string{false: "first", true: "again"}[again], func(b *testing.B) {
			s := New(Config{JanitorInterval: -1, MaxRecords: 1 << 30})
			defer s.Close()
			ctx := context.Background()
			keys := make([]string, b.N)
			for n := range keys {
				keys[n] = fmt.Sprintf("%036d", n)
				p := &retrysafe.ClaimParams{Key: keys[n], Fingerprint: strings.Repeat("f", 64), Token: retrysafe.NewToken(), Now: base, Lease: time.Minute}
				if _, err := s.Claim(ctx, p); err != nil {
					b.Fatal(err)
				}
				resp := &retrysafe.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ord_1"}`)}
				if err := s.Complete(ctx, &retrysafe.CompleteParams{Key: keys[n], Token: p.Token, Now: base, TTL: time.Hour, Response: resp}); err != nil {
					b.Fatal(err)
				}
				for range map[bool]int{false: 0, true: 2}[again] { // the second Get keeps the record
					if _, err := s.Get(ctx, &retrysafe.GetParams{Key: keys[n], Now: base}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for n := range b.N {
				if _, err := s.Get(ctx, &retrysafe.GetParams{Key: keys[n], Now: base}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNewKey: Claim and Complete of a fresh key, the store growing
// by one record per iteration (as under a stream of new requests), with a
// header map shared by every response, as the middleware stores it.
// cpu-ns/op is the process's CPU time per key (the collector's included).
func BenchmarkNewKey(b *testing.B) {
	nk := newKeyBench(b, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Process()
	for n := range b.N {
		nk.run(b, n)
	}
	b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkNewKeyParallel is BenchmarkNewKey from GOMAXPROCS goroutines,
// each taking its keys in runs of 1024 (one shared counter per key would
// measure the counter). Compare its cpu-ns/op with BenchmarkNewKey's: the
// difference is what running on several cores at once adds per key.
func BenchmarkNewKeyParallel(b *testing.B) {
	const run = 1024
	nk := newKeyBench(b, b.N+run*runtime.GOMAXPROCS(0))
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Process()
	b.RunParallel(func(pb *testing.PB) {
		var n, end int
		for pb.Next() {
			if n == end {
				n = int(next.Add(run)) - run
				end = n + run
			}
			nk.run(b, n)
			n++
		}
	})
	b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
}

// newKeyRun is the state of BenchmarkNewKey and BenchmarkNewKeyParallel.
type newKeyRun struct {
	s      *Store
	fp     string
	keys   []string
	tokens []string
	resp   *retrysafe.Response
}

// newKeyBench makes a store and n keys for it, closed when b ends.
func newKeyBench(b *testing.B, n int) *newKeyRun {
	s := New(Config{JanitorInterval: -1, MaxRecords: 1 << 30})
	b.Cleanup(func() { s.Close() })
	nk := &newKeyRun{
		s:      s,
		fp:     strings.Repeat("f", 64),
		keys:   make([]string, n),
		tokens: make([]string, 64),
		resp:   &retrysafe.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ord_1"}`)},
	}
	for i := range nk.keys {
		nk.keys[i] = fmt.Sprintf("%036d", i)
	}
	for i := range nk.tokens {
		nk.tokens[i] = retrysafe.NewToken()
	}
	return nk
}

// run claims and completes the n-th key.
func (nk *newKeyRun) run(b *testing.B, n int) {
	ctx := context.Background()
	p := retrysafe.ClaimParams{Scope: "POST /orders", Key: nk.keys[n], Fingerprint: nk.fp, Token: nk.tokens[n%len(nk.tokens)], Now: base, Lease: time.Minute}
	if _, err := nk.s.Claim(ctx, &p); err != nil {
		b.Fatal(err)
	}
	if err := nk.s.Complete(ctx, &retrysafe.CompleteParams{Scope: p.Scope, Key: p.Key, Token: p.Token, Now: base, TTL: time.Hour, Response: nk.resp}); err != nil {
		b.Fatal(err)
	}
}
