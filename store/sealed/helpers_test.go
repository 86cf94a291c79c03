package sealed_test

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// newKey returns a key with a fresh random secret.
func newKey(id string) sealed.Key {
	k := sealed.Key{ID: id, Secret: make([]byte, sealed.KeySize)}
	_, _ = rand.Read(k.Secret)
	return k
}

// keyLine renders k in the key file format.
func keyLine(k sealed.Key) string {
	return k.ID + ":" + base64.StdEncoding.EncodeToString(k.Secret)
}

// testHMAC is the HMAC key of the rings the helpers make: one for the
// whole test binary, as one deployment keeps one across rotations.
var testHMAC = newKey(sealed.HMACKeyID)

// testRing returns a ring of fresh keys with the given ids, oldest first,
// and testHMAC.
func testRing(t testing.TB, ids ...string) *sealed.KeyRing {
	t.Helper()
	keys := []sealed.Key{testHMAC}
	for _, id := range ids {
		keys = append(keys, newKey(id))
	}
	ring, err := sealed.NewKeyRing(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

// ringOf parses key file lines into a ring, with testHMAC first.
func ringOf(t testing.TB, keys ...sealed.Key) *sealed.KeyRing {
	t.Helper()
	lines := []string{keyLine(testHMAC)}
	for _, k := range keys {
		lines = append(lines, keyLine(k))
	}
	ring, err := sealed.ParseKeyRing([]byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

func wrap(t testing.TB, inner retrysafe.Store, ring *sealed.KeyRing, cfg sealed.Config) retrysafe.Store {
	t.Helper()
	s, err := sealed.New(inner, ring, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stored is the scope under which the rings of the helpers (testHMAC)
// keep scope.
func stored(t testing.TB, scope string) string {
	t.Helper()
	return testRing(t, "any").Scope(scope)
}
