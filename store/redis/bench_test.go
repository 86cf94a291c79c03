package redis_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

// Reproduce (see docs/performance-redis.md):
//
//	go test -run '^$' -bench . -benchtime 3s -count 3 ./store/redis/

// benchConcurrency is the number of concurrent callers of the throughput
// benchmarks.
const benchConcurrency = 32

// benchResponse is a typical small JSON answer.
func benchResponse() *retrysafe.Response {
	body := []byte(fmt.Sprintf(`{"id":"pay_%0200d","amount":1000,"currency":"eur"}`, 0))
	return &retrysafe.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/payments/pay_123"}},
		Body:   body,
	}
}

// benchSetup returns a store on a client with a pool for benchConcurrency
// callers and a round-trip counter, and the prefix.
func benchSetup(b *testing.B) (*redisstore.Store, *goredis.Client, *commandCounter, string) {
	b.Helper()
	c := newClient(b, func(o *goredis.Options) { o.PoolSize = benchConcurrency })
	counter := &commandCounter{}
	c.AddHook(counter)
	prefix := testPrefix(b)
	s, err := redisstore.New(c, redisstore.Config{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s, c, counter, prefix
}

// newRequest is what the engine does for a new key: claim, then complete.
func newRequest(b *testing.B, s *redisstore.Store, key string, resp *retrysafe.Response) {
	ctx := b.Context()
	now := time.Now()
	p := &retrysafe.ClaimParams{Scope: "bench", Key: key, Fingerprint: "fp", Token: retrysafe.NewToken(), Now: now, Lease: 30 * time.Second}
	res, err := s.Claim(ctx, p)
	if err != nil || !res.Claimed {
		b.Fatalf("claim %s: %+v, %v", key, res, err)
	}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "bench", Key: key, Token: p.Token, Now: now, TTL: time.Minute, Response: resp}); err != nil {
		b.Fatalf("complete %s: %v", key, err)
	}
}

// replay is what the engine does for a completed key: one claim that
// returns the stored record.
func replay(b *testing.B, s *redisstore.Store, key string) {
	res, err := s.Claim(b.Context(), &retrysafe.ClaimParams{Scope: "bench", Key: key, Fingerprint: "fp", Token: retrysafe.NewToken(), Now: time.Now(), Lease: 30 * time.Second})
	if err != nil || res.Claimed || res.Record.Response == nil {
		b.Fatalf("replay %s: %+v, %v", key, res, err)
	}
}

// BenchmarkRoundTrips counts the round trips of one new request (claim +
// complete; the floor is 2) and of one replay (the floor is 1) with a
// goredis hook, and reports them as roundtrips/op.
func BenchmarkRoundTrips(b *testing.B) {
	resp := benchResponse()
	b.Run("new", func(b *testing.B) {
		s, _, counter, _ := benchSetup(b)
		newRequest(b, s, "warm-up", resp) // loads the scripts
		counter.n.Store(0)
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			newRequest(b, s, fmt.Sprint("new-", i), resp)
		}
		b.ReportMetric(float64(counter.n.Load())/float64(b.N), "roundtrips/op")
	})
	b.Run("replay", func(b *testing.B) {
		s, _, counter, _ := benchSetup(b)
		newRequest(b, s, "done", resp)
		replay(b, s, "done")
		counter.n.Store(0)
		b.ResetTimer()
		for b.Loop() {
			replay(b, s, "done")
		}
		b.ReportMetric(float64(counter.n.Load())/float64(b.N), "roundtrips/op")
	})
}

// BenchmarkThroughput32 measures requests per second at 32 concurrent
// callers: new requests (claim + complete) and replays through the store,
// and, in the same run, the physical limit of this Redis: a raw SET NX +
// SET pair with a value the size of the stored response (for new requests)
// and a raw GET of such a value (for replays).
func BenchmarkThroughput32(b *testing.B) {
	resp := benchResponse()
	parallel := func(b *testing.B, op func(i int64)) {
		b.Helper()
		b.SetParallelism((benchConcurrency + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		var seq atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				op(seq.Add(1))
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	}
	b.Run("store/new", func(b *testing.B) {
		s, _, _, _ := benchSetup(b)
		newRequest(b, s, "warm-up", resp)
		parallel(b, func(i int64) { newRequest(b, s, fmt.Sprint("new-", i), resp) })
	})
	b.Run("store/replay", func(b *testing.B) {
		s, _, _, _ := benchSetup(b)
		for i := range benchConcurrency {
			newRequest(b, s, fmt.Sprint("done-", i), resp)
		}
		parallel(b, func(i int64) { replay(b, s, fmt.Sprint("done-", i%benchConcurrency)) })
	})
	value := string(resp.Body) + "Content-Type: application/json\r\nLocation: /payments/pay_123\r\n"
	b.Run("raw/SET+SET", func(b *testing.B) {
		_, c, _, prefix := benchSetup(b)
		ctx := b.Context()
		parallel(b, func(i int64) {
			k := fmt.Sprint(prefix, "raw-", i)
			if err := c.SetNX(ctx, k, "processing", 30*time.Second).Err(); err != nil {
				b.Fatal(err)
			}
			if err := c.Set(ctx, k, value, time.Minute).Err(); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("raw/GET", func(b *testing.B) {
		_, c, _, prefix := benchSetup(b)
		ctx := b.Context()
		for i := range benchConcurrency {
			c.Set(ctx, fmt.Sprint(prefix, "raw-", i), value, time.Minute)
		}
		parallel(b, func(i int64) {
			if err := c.Get(ctx, fmt.Sprint(prefix, "raw-", i%benchConcurrency)).Err(); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkRatio32 measures, at 32 concurrent callers, the store against
// its raw floor in interleaved rounds (store, then raw, ratioRounds times),
// so that a machine whose speed drifts during the run affects both sides
// of each ratio alike. x-raw is the median of the rounds' ratios of
// requests per second: new requests against raw SET NX + SET, replays
// against raw GET. Use -benchtime Nx with N a few thousand.
func BenchmarkRatio32(b *testing.B) {
	const ratioRounds = 8
	resp := benchResponse()
	value := string(resp.Body) + "Content-Type: application/json\r\nLocation: /payments/pay_123\r\n"
	// run performs n calls of op from benchConcurrency goroutines and
	// returns the calls per second.
	run := func(n int, op func(i int64)) float64 {
		start := time.Now()
		parallelCalls(n, op)
		return float64(n) / time.Since(start).Seconds()
	}
	measure := func(b *testing.B, storeOp, rawOp func(round int, i int64)) {
		per := max(b.N/ratioRounds, 1)
		var ratios []float64
		var storeRPS float64
		for round, done := 0, 0; done < b.N; round, done = round+1, done+per {
			n := min(per, b.N-done)
			st := run(n, func(i int64) { storeOp(round, i) })
			raw := run(n, func(i int64) { rawOp(round, i) })
			storeRPS += st
			ratios = append(ratios, st/raw)
		}
		slices.Sort(ratios)
		b.ReportMetric(storeRPS/float64(len(ratios)), "store-req/s")
		b.ReportMetric(ratios[len(ratios)/2], "x-raw")
		b.ReportMetric(ratios[0], "x-raw-min")
		b.ReportMetric(ratios[len(ratios)-1], "x-raw-max")
	}
	b.Run("new", func(b *testing.B) {
		s, c, _, prefix := benchSetup(b)
		ctx := b.Context()
		newRequest(b, s, "warm-up", resp)
		b.ResetTimer()
		measure(b, func(round int, i int64) {
			newRequest(b, s, fmt.Sprint("new-", round, "-", i), resp)
		}, func(round int, i int64) {
			k := fmt.Sprint(prefix, "raw-", round, "-", i)
			if err := c.SetNX(ctx, k, "processing", 30*time.Second).Err(); err != nil {
				b.Fatal(err)
			}
			if err := c.Set(ctx, k, value, time.Minute).Err(); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("replay", func(b *testing.B) {
		s, c, _, prefix := benchSetup(b)
		ctx := b.Context()
		for i := range benchConcurrency {
			newRequest(b, s, fmt.Sprint("done-", i), resp)
			c.Set(ctx, fmt.Sprint(prefix, "raw-", i), value, time.Minute)
		}
		b.ResetTimer()
		measure(b, func(_ int, i int64) {
			replay(b, s, fmt.Sprint("done-", i%benchConcurrency))
		}, func(_ int, i int64) {
			if err := c.Get(ctx, fmt.Sprint(prefix, "raw-", i%benchConcurrency)).Err(); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkCPU32 measures what a new request (Claim + Complete) and the raw
// SET NX + SET pair cost in CPU at 32 concurrent callers, which a loaded
// machine distorts less than requests per second: srv-us/op is the
// server's CPU time (INFO cpu, user + system, so run it against a Redis of
// its own: other clients' commands count too), cli-us/op this process's
// (getrusage). With RETRYSAFE_CALLGRIND_PID set to the pid of a
// redis-server running under valgrind --tool=callgrind, it zeroes the
// counters before the timed loop and dumps them after it (callgrind_control
// -z, --dump=NAME), so that the dump's total divided by b.N is the server's
// instructions per operation (docs/performance-redis.md).
func BenchmarkCPU32(b *testing.B) {
	resp := benchResponse()
	value := string(resp.Body) + "Content-Type: application/json\r\nLocation: /payments/pay_123\r\n"
	run := func(b *testing.B, c *goredis.Client, op func(i int64)) {
		callgrind(b, "-z")
		srv0, cli0 := serverCPU(b, c), processCPU()
		b.ResetTimer()
		parallelCalls(b.N, op)
		b.StopTimer()
		callgrind(b, "--dump="+b.Name())
		srv, cli := serverCPU(b, c)-srv0, processCPU()-cli0
		b.ReportMetric(srv.Seconds()*1e6/float64(b.N), "srv-us/op")
		b.ReportMetric(cli.Seconds()*1e6/float64(b.N), "cli-us/op")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	}
	b.Run("new", func(b *testing.B) {
		s, c, _, _ := benchSetup(b)
		newRequest(b, s, "warm-up", resp)
		run(b, c, func(i int64) { newRequest(b, s, fmt.Sprint("new-", i), resp) })
	})
	b.Run("raw", func(b *testing.B) {
		_, c, _, prefix := benchSetup(b)
		ctx := b.Context()
		run(b, c, func(i int64) {
			k := fmt.Sprint(prefix, "raw-", i)
			if err := c.SetNX(ctx, k, "processing", 30*time.Second).Err(); err != nil {
				b.Fatal(err)
			}
			if err := c.Set(ctx, k, value, time.Minute).Err(); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// serverCPU returns the server's CPU time so far (INFO cpu).
func serverCPU(b *testing.B, c *goredis.Client) time.Duration {
	info, err := c.Info(b.Context(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sec float64
	for _, line := range strings.Split(info, "\r\n") {
		name, v, _ := strings.Cut(line, ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu: %s", line)
			}
			sec += f
		}
	}
	return time.Duration(sec * float64(time.Second))
}

// processCPU returns this process's CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// callgrind runs callgrind_control with args against
// RETRYSAFE_CALLGRIND_PID, if set.
func callgrind(b *testing.B, args ...string) {
	pid := os.Getenv("RETRYSAFE_CALLGRIND_PID")
	if pid == "" {
		return
	}
	if out, err := exec.Command("callgrind_control", append(args, pid)...).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control %v: %v: %s", args, err, out)
	}
}

// parallelCalls makes n calls of op, numbered 1 to n, from
// benchConcurrency goroutines, and returns once all have returned.
func parallelCalls(n int, op func(i int64)) {
	var seq atomic.Int64
	var wg sync.WaitGroup
	for range benchConcurrency {
		wg.Go(func() {
			for {
				i := seq.Add(1)
				if i > int64(n) {
					return
				}
				op(i)
			}
		})
	}
	wg.Wait()
}
