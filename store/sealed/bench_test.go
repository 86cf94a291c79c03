package sealed_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/sealed"
)

var benchSizes = []int{64, 1 << 10, 16 << 10, 256 << 10, 1 << 20}

func benchResponse(size int) *retrysafe.Response {
	return &retrysafe.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/payments/pay_123"}},
		Body:   bytes.Repeat([]byte("x"), size),
	}
}

// BenchmarkSeal measures sealing one response per body size.
func BenchmarkSeal(b *testing.B) {
	ring := testRing(b, "k1")
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("body=%d", size), func(b *testing.B) {
			resp := benchResponse(size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ring.Seal("scope", "key", resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOpen measures opening one sealed response per body size.
func BenchmarkOpen(b *testing.B) {
	ring := testRing(b, "k1")
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("body=%d", size), func(b *testing.B) {
			s, err := ring.Seal("scope", "key", benchResponse(size))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ring.Open("scope", "key", s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMemoryClaimCompleteReplay measures, on the memory store, one
// new key (claim, complete) and one replay of it (a claim that finds the
// completed record), plain and through the sealed wrapper. Each iteration
// runs both, one after the other, so drift in the machine's speed hits
// both alike; it reports each one's ns/op and the ratio sealed/plain, the
// cost of encryption where the store itself costs least.
func BenchmarkMemoryClaimCompleteReplay(b *testing.B) {
	ring := testRing(b, "k1")
	for _, size := range []int{1 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("body=%d", size), func(b *testing.B) {
			plain := memory.New(memory.Config{})
			sealedStore := wrap(b, memory.New(memory.Config{}), ring, sealed.Config{})
			resp := benchResponse(size)
			ctx := b.Context()
			now := time.Now()
			round := func(s retrysafe.Store, key string) time.Duration {
				start := time.Now()
				p := &retrysafe.ClaimParams{Scope: "scope", Key: key, Fingerprint: "fp", Token: retrysafe.NewToken(), Now: now, Lease: time.Minute}
				res, err := s.Claim(ctx, p)
				if err != nil || !res.Claimed {
					b.Fatalf("claim: %v", err)
				}
				if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: key, Token: p.Token, Now: now, TTL: time.Hour, Response: resp}); err != nil {
					b.Fatal(err)
				}
				p.Token = retrysafe.NewToken()
				res, err = s.Claim(ctx, p)
				if err != nil || res.Claimed || len(res.Record.Response.Body) != size {
					b.Fatalf("replay: %v", err)
				}
				return time.Since(start)
			}
			var plainTime, sealedTime time.Duration
			i := 0
			for b.Loop() {
				i++
				key := strconv.Itoa(i)
				if i%2 == 0 { // alternate which goes first
					plainTime += round(plain, key)
					sealedTime += round(sealedStore, key)
				} else {
					sealedTime += round(sealedStore, key)
					plainTime += round(plain, key)
				}
			}
			b.ReportMetric(float64(plainTime.Nanoseconds())/float64(b.N), "plain-ns/op")
			b.ReportMetric(float64(sealedTime.Nanoseconds())/float64(b.N), "sealed-ns/op")
			b.ReportMetric(float64(sealedTime)/float64(plainTime), "sealed/plain")
		})
	}
}
