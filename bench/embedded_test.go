package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/bench/pebblekv"
	"github.com/retrysafe/retrysafe/internal/cputime"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// BenchmarkEmbeddedClaimComplete compares the two embedded engines at the
// store level, without HTTP: the path of every new key (Claim, then
// Complete) from 32 goroutines per GOMAXPROCS, as under a busy gateway,
// on the SQLite store (WAL, synchronous=FULL) and the pebble prototype
// (pebble.Sync), each on a fresh directory of the same disk. It reports
// the process's CPU per new key (cpu-µs/op) besides the wall time.
func BenchmarkEmbeddedClaimComplete(b *testing.B) {
	ctx := context.Background()
	open := map[string]func(dir string) (retrysafe.Store, func(), error){
		"sqlite": func(dir string) (retrysafe.Store, func(), error) {
			s, err := sqlite.Open(ctx, filepath.Join(dir, "bench.db"), sqlite.Config{})
			if err != nil {
				return nil, nil, err
			}
			return s, func() { _ = s.Close() }, nil
		},
		"pebble": func(dir string) (retrysafe.Store, func(), error) {
			s, err := pebblekv.Open(filepath.Join(dir, "pebble"))
			if err != nil {
				return nil, nil, err
			}
			return s, func() { _ = s.Close() }, nil
		},
	}
	resp := &retrysafe.Response{Status: 201, Body: []byte(`{"paymentId":"pay_1","status":"succeeded"}`)}
	for _, name := range []string{"sqlite", "pebble"} {
		b.Run(name, func(b *testing.B) {
			s, closeStore, err := open[name](b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer closeStore()
			var seq atomic.Int64
			b.SetParallelism(32)
			cpu0 := cputime.Process()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					now := time.Now()
					p := &retrysafe.ClaimParams{Scope: "tenant", Key: fmt.Sprint("k", seq.Add(1)),
						Fingerprint: "fp", Token: "tok", Now: now, Lease: 30 * time.Second}
					res, err := s.Claim(ctx, p)
					if err != nil || !res.Claimed {
						b.Errorf("Claim: %v, %v", res, err)
						return
					}
					if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: p.Scope, Key: p.Key, Token: p.Token,
						Now: now, TTL: time.Hour, Response: resp}); err != nil {
						b.Errorf("Complete: %v", err)
						return
					}
				}
			})
			b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N)/1000, "cpu-µs/op")
		})
	}
}
