package retrysafe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/internal/cputime"
)

// json64K returns a JSON document of about 64 KiB: a list of order lines.
func json64K() []byte {
	var b strings.Builder
	b.WriteString(`{"order":"ord_4711","lines":[`)
	for i := 0; b.Len() < 64<<10-200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sku":"SKU-%06d","name":"Widget \u00e9 %d","qty":%d,"price":%d.%02d,"tags":["a","b"],"gift":false}`, i, i, i%7+1, i*13%1000, i%100)
	}
	b.WriteString(`],"total":123456.78}`)
	return []byte(b.String())
}

// nestedJSON2K returns a checkout of about 2 KiB as clients send it:
// pretty-printed, members out of order, objects nested three deep.
func nestedJSON2K() []byte {
	var b strings.Builder
	b.WriteString(`{
  "customer": {"id": "cus_9s6XKzkNRiz8i3", "email": "jenny.rosen@example.com",
    "address": {"line1": "510 Townsend St", "city": "San Francisco", "postal_code": "94103", "country": "US"}},
  "currency": "eur",
  "metadata": {"requestedAt": "2026-11-29T18:00:00Z", "channel": "web", "campaign": "black-friday"},
  "items": [`)
	for i := 0; b.Len() < 2<<10-160; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `
    {"sku": "SKU-%06d", "quantity": %d, "unit_amount": %d.%02d, "tax": {"rate": 0.19, "included": true}, "name": "Widget %d"}`,
			i, i%5+1, 10+i*7%90, i*13%100, i)
	}
	b.WriteString(`
  ],
  "amount": 19990,
  "confirm": true
}`)
	return []byte(b.String())
}

var benchSink string

// BenchmarkFingerprint compares Fingerprint with plain SHA-256 over the same
// raw bytes ("sha256-raw"), the floor for any body fingerprint. The 21-byte
// body is bench/peers' request; "middleware" reuses one buffer across
// calls, as the middleware does. cpu-ns/op is the process's CPU time per
// call, background GC included, which moves less than wall time with the
// load of a shared machine.
func BenchmarkFingerprint(b *testing.B) {
	bodies := []struct {
		name string
		body []byte
	}{
		{"order-21B", []byte(`{"sku":"abc","qty":1}`)},
		{"payment-300B", []byte(paymentJSON)},
		{"nested-2KiB", nestedJSON2K()},
		{"json-64KiB", json64K()},
	}
	for _, bb := range bodies {
		b.Run(bb.name+"/fingerprint", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			cpu := cputime.Process()
			for b.Loop() {
				benchSink = Fingerprint("POST", "/v1/payments", "expand=customer", bb.body, []string{"/metadata/requestedAt"})
			}
			b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
		})
		b.Run(bb.name+"/middleware", func(b *testing.B) { // as the middleware calls it
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			cpu := cputime.Process()
			for b.Loop() {
				benchSink, _ = fingerprint(context.Background(), "POST", "/v1/payments", "expand=customer", bb.body, []string{"/metadata/requestedAt"})
			}
			b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
		})
		b.Run(bb.name+"/sha256-raw", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			cpu := cputime.Process()
			for b.Loop() {
				sum := sha256.Sum256(bb.body)
				benchSink = hex.EncodeToString(sum[:])
			}
			b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
