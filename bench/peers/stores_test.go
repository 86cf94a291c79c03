package peers

import (
	"net/http"
	"testing"

	"github.com/retrysafe/retrysafe/internal/e2e/stores"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/cputime"
)

// BenchmarkStoreCPU runs retrysafe's middleware in-process on the SQLite,
// PostgreSQL and Redis stores (fresh file, schema or key prefix each run)
// with 16 concurrent callers, and reports the process's CPU time per
// request (cpu-µs/op). The stores' own work (drivers, SQLite) is the same
// code before and after a change to the middleware, so a fall in this
// column is the middleware's CPU; wall time is the stores' latency.
func BenchmarkStoreCPU(b *testing.B) {
	stores := []struct {
		name string
		open func(testing.TB) retrysafe.Store
	}{
		{"sqlite", func(tb testing.TB) retrysafe.Store { return stores.SQLite(tb) }},
		{"postgres", func(tb testing.TB) retrysafe.Store { return stores.Postgres(tb) }},
		{"redis", func(tb testing.TB) retrysafe.Store { return stores.Redis(tb) }},
	}
	for _, st := range stores {
		for _, replay := range []bool{false, true} {
			name := st.name + "/new"
			if replay {
				name = st.name + "/replay"
			}
			b.Run(name, func(b *testing.B) {
				mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: st.open(b)})
				if err != nil {
					b.Fatal(err)
				}
				h := mw(netHTTPHandler)
				keys := &keySource{replay: replay}
				if replay {
					c := newNetHTTPClient(h)
					for n := range uint64(storedKeys) {
						if s := c.do(keyAt(n)); s != http.StatusCreated {
							b.Fatalf("storing key %d: status %d", n, s)
						}
					}
				}
				b.ReportAllocs()
				b.SetParallelism(8) // 16 callers on 2 cores: overlap the stores' waits
				cpu := cputime.Process()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					c := newNetHTTPClient(h)
					for pb.Next() {
						if s := c.do(keys.key()); s != http.StatusCreated {
							b.Errorf("status %d", s)
							return
						}
					}
				})
				b.StopTimer()
				b.ReportMetric(float64((cputime.Process()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
			})
		}
	}
}
