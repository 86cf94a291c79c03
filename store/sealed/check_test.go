package sealed_test

import (
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// TestCheck: the first instance with a ring leaves the check record; one
// with the same HMAC key (after a rotation of the encryption keys too)
// passes; one without a ring, or with another HMAC key, fails and says
// why, since it would find none of the stored records.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	inner := memory.New(memory.Config{})
	t.Cleanup(func() { inner.Close() })
	if err := sealed.Check(ctx, wrap(t, inner, nil, sealed.Config{})); err != nil {
		t.Fatalf("Check without a ring on an empty store: %v", err)
	}
	for i, ring := range []*sealed.KeyRing{testRing(t, "k1"), testRing(t, "k1"), testRing(t, "k1", "k2")} {
		if err := sealed.Check(ctx, wrap(t, inner, ring, sealed.Config{})); err != nil {
			t.Fatalf("Check %d with the same HMAC key: %v", i, err)
		}
	}
	err := sealed.Check(ctx, wrap(t, inner, nil, sealed.Config{}))
	if err == nil || !strings.Contains(err.Error(), "no key ring is configured") {
		t.Fatalf("Check without a ring on an encrypted store: %v", err)
	}
	other, err := sealed.NewKeyRing(newKey(sealed.HMACKeyID), newKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	err = sealed.Check(ctx, wrap(t, inner, other, sealed.Config{}))
	if err == nil || !strings.Contains(err.Error(), "another hmac key") {
		t.Fatalf("Check with another HMAC key: %v", err)
	}
	if err := sealed.Check(ctx, inner); err == nil {
		t.Fatal("Check of a store that is not a wrapper succeeded")
	}
}
