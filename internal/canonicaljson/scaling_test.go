package canonicaljson

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// scalingBody returns a JSON document of kind, of about size bytes.
func scalingBody(kind string, size int) []byte {
	var b strings.Builder
	switch kind {
	case "normal": // order lines
		b.WriteString(`{"order":"ord_4711","lines":[`)
		for i := 0; b.Len() < size-120; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"sku":"SKU-%06d","name":"Widget \u00e9 %d","qty":%d,"price":%d.%02d,"gift":false}`, i, i, i%7+1, i*13%1000, i%100)
		}
		b.WriteString(`]}`)
	case "exponent": // one number with a long exponent
		b.WriteString(`{"a":1e`)
		b.WriteString(strings.Repeat("9", size-8))
		b.WriteString(`}`)
	case "mantissa": // one number with long digits and a long negative exponent
		n := (size - 12) / 2
		b.WriteString(`[1.`)
		b.WriteString(strings.Repeat("7", n))
		b.WriteString(`e-`)
		b.WriteString(strings.Repeat("3", n))
		b.WriteString(`]`)
	case "deep": // objects nested up to 900 deep, repeated
		depth := min(900, (size-8)/6)
		one := strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
		b.WriteString("[")
		for i := 0; b.Len() < size-len(one)-2 || i == 0; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(one)
		}
		b.WriteString("]")
	case "string": // one long string with escapes
		b.WriteString(`{"note":"`)
		for b.Len() < size-16 {
			b.WriteString(`abcdefgh\n\u00e9é\"`)
		}
		b.WriteString(`"}`)
	case "wide": // one object with many members
		b.WriteString(`{`)
		for i := 0; b.Len() < size-32; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"Member_%d":%d`, i*7919%1000003, i)
		}
		b.WriteString(`}`)
	default:
		panic(kind)
	}
	return []byte(b.String())
}

var scalingKinds = []string{"normal", "exponent", "mantissa", "deep", "string", "wide"}

// BenchmarkAppendScaling canonicalises documents of growing size (1 KiB to
// 1 MiB) of several shapes and reports ns/byte, which stays flat when every
// step is linear in the document's size.
func BenchmarkAppendScaling(b *testing.B) {
	for _, kind := range scalingKinds {
		for _, size := range []int{1 << 10, 16 << 10, 256 << 10, 1 << 20} {
			body := scalingBody(kind, size)
			b.Run(fmt.Sprintf("%s/%dKiB", kind, size>>10), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				var dst []byte
				for b.Loop() {
					var err error
					if dst, err = Append(context.Background(), dst[:0], body, nil); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(body)), "ns/byte")
			})
		}
	}
}
