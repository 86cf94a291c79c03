package retrysafelambda

import (
	"encoding/json"
	"testing"

	"github.com/retrysafe/retrysafe/internal/canonicaljson"
	"github.com/retrysafe/retrysafe/store/memory"
)

// FuzzPayloadFingerprint: for any payload and pointer, picking a member
// never panics, a member found is the payload's own valid JSON, and the
// fingerprint is deterministic and ignores whitespace around the payload.
func FuzzPayloadFingerprint(f *testing.F) {
	f.Add([]byte(`{"amount":1,"items":[{"sku":"a"}]}`), "/items/0/sku")
	f.Add([]byte(`{"a~b":{"c/d":null}}`), "/a~0b/c~1d")
	f.Add([]byte(`[1,2,3]`), "/01")
	f.Add([]byte(`not json`), "/x")
	f.Add([]byte(`{"x":1,"x":2}`), "/x")
	store := memory.New(memory.Config{})
	f.Cleanup(func() { store.Close() })
	f.Fuzz(func(t *testing.T, payload []byte, pointer string) {
		if pointer == "" || canonicaljson.ValidatePointer(pointer) != nil {
			return
		}
		v, found, err := lookupRaw(payload, pointerTokens(pointer))
		if found && (err != nil || !json.Valid(v)) {
			t.Fatalf("found %q (err %v) for %q in %q", v, err, pointer, payload)
		}
		w, err := newWrapper(Config{Store: store, Validate: []string{pointer}})
		if err != nil {
			t.Fatal(err)
		}
		a, errA := w.payloadFingerprint("event", "", "", "", payload)
		b, errB := w.payloadFingerprint("event", "", "", "", append(append([]byte(" \n"), payload...), ' '))
		if (errA == nil) != (errB == nil) || a != b {
			t.Fatalf("fingerprints %q (%v) and %q (%v) of one payload", a, errA, b, errB)
		}
	})
}
