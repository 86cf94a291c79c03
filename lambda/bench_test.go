package retrysafelambda

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// BenchmarkFunc measures a wrapped direct invocation on the memory store
// against retrysafe.Run with one Doer (the baseline: the engine without
// the wrapper's per-invocation Doer, lease bound and key extraction), for
// new keys and for replays, with a deadline as Lambda sets one.
func BenchmarkFunc(b *testing.B) {
	fn := func(ctx context.Context, o order) (receipt, error) { return receipt{Charge: o.OrderID}, nil }
	events := make([]json.RawMessage, 1024)
	for i := range events {
		events[i], _ = json.Marshal(order{OrderID: "o-" + strconv.Itoa(i), Amount: 100})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()

	for _, replay := range []bool{false, true} {
		name := "new"
		if replay {
			name = "replay"
		}
		b.Run("wrapper/"+name, func(b *testing.B) {
			store := memory.New(memory.Config{})
			defer store.Close()
			h, err := Func(Config{Store: store, Key: "/orderId"}, fn)
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				ev := events[i%len(events)]
				if !replay {
					ev, _ = json.Marshal(order{OrderID: "n-" + strconv.Itoa(i), Amount: 100})
				}
				if _, err := h(ctx, ev); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run("run/"+name, func(b *testing.B) {
			store := memory.New(memory.Config{})
			defer store.Close()
			d, err := retrysafe.NewDoer(retrysafe.DoConfig{Store: store})
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				ev := events[i%len(events)]
				if !replay {
					ev, _ = json.Marshal(order{OrderID: "n-" + strconv.Itoa(i), Amount: 100})
				}
				var o order
				_ = json.Unmarshal(ev, &o)
				fp := retrysafe.Fingerprint("", "event:", "", ev, nil)
				if _, err := retrysafe.Run(ctx, d, o.OrderID, fp, func(ctx context.Context) (receipt, error) { return fn(ctx, o) }); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
