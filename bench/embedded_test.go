package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/cputime"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// BenchmarkEmbeddedClaimComplete measures the embedded store at the
// store level, without HTTP: the path of every new key (Claim, then
// Complete) from 32 goroutines per GOMAXPROCS, as under a busy gateway,
// on the SQLite store (WAL, synchronous=FULL) in a fresh directory. It
// reports the process's CPU per new key (cpu-µs/op) besides the wall time.
func BenchmarkEmbeddedClaimComplete(b *testing.B) {
	ctx := context.Background()
	resp := &retrysafe.Response{Status: 201, Body: []byte(`{"paymentId":"pay_1","status":"succeeded"}`)}
	b.Run("sqlite", func(b *testing.B) {
		s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), sqlite.Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
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
