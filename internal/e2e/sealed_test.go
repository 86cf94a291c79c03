package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/e2e/stores"
	"github.com/retrysafe/retrysafe/store/sealed"
	"github.com/retrysafe/retrysafe/store/sqlite"
	"github.com/retrysafe/retrysafe/store/storetest"
)

// The tests of store/sealed that need more than the memory store: the
// wrapper over every store. store/sealed keeps the memory-only versions, so
// that its module requires no driver.

var sealedNow = time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)

const sealedSecret = "Jane Doe, 1 Main St, card ending 4242"

func sealedPayment() *retrysafe.Response {
	return &retrysafe.Response{
		Status: http.StatusCreated,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Location":     {"/customers/" + sealedSecret},
			"X-Multi":      {"one", "", "three"},
		},
		Body: []byte(`{"customer":"` + sealedSecret + `"}`),
	}
}

// sealedRing returns a ring of fresh random keys with the given ids, and
// a fresh hmac key.
func sealedRing(t testing.TB, ids ...string) *sealed.KeyRing {
	t.Helper()
	keys := make([]sealed.Key, len(ids)+1)
	for i, id := range append(ids, sealed.HMACKeyID) {
		keys[i] = sealed.Key{ID: id, Secret: make([]byte, sealed.KeySize)}
		_, _ = rand.Read(keys[i].Secret)
	}
	ring, err := sealed.NewKeyRing(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

func sealedWrap(t testing.TB, inner retrysafe.Store, ring *sealed.KeyRing, cfg sealed.Config) retrysafe.Store {
	t.Helper()
	s, err := sealed.New(inner, ring, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sealedComplete claims scope/key on s and completes it with resp.
func sealedComplete(t *testing.T, s retrysafe.Store, scope, key string, resp *retrysafe.Response) {
	t.Helper()
	ctx := t.Context()
	res, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: scope, Key: key, Fingerprint: "fp", Token: retrysafe.NewToken(), Now: sealedNow, Lease: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatalf("Claim(%q, %q): claimed=%v err=%v", scope, key, res != nil && res.Claimed, err)
	}
	err = s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: key, Token: res.Record.Token, Now: sealedNow, TTL: time.Hour, Response: resp})
	if err != nil {
		t.Fatalf("Complete(%q, %q): %v", scope, key, err)
	}
}

func sealedGet(s retrysafe.Store, ctx context.Context, scope, key string) (*retrysafe.Record, error) {
	return s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: key, Now: sealedNow})
}

func sealedWantResponse(t *testing.T, what string, got, want *retrysafe.Response) {
	t.Helper()
	if got == nil || got.Status != want.Status || !reflect.DeepEqual(got.Header, want.Header) || !bytes.Equal(got.Body, want.Body) {
		t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
}

// TestSealedConformance runs the store suite on the sealing wrapper over
// every store: sealing must not change what a store keeps or how it
// behaves. The suite's Admin scenarios are left out: with a ring the
// wrapper's Admin shows the stored scopes (the HMAC) by design; see
// store/sealed's TestAdmin.
func TestSealedConformance(t *testing.T) {
	t.Parallel()
	ring := sealedRing(t, "k1", "k2")
	for _, name := range []string{"memory", "sqlite", "postgres", "redis", "mysql", "dynamodb"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) retrysafe.Store {
				return sealedWithoutAdmin(sealedWrap(t, stores.All[name](t), ring, sealed.Config{}))
			})
		})
	}
}

// sealedWithoutAdmin returns s with the optional abilities the stores
// here have, but Admin: Notifier and Pinger, and Sweeper, or (Redis)
// ReadyChecker; or (DynamoDB) Pinger, Sweeper, ReadyChecker and its body
// limit.
func sealedWithoutAdmin(s retrysafe.Store) retrysafe.Store {
	n, notifies := retrysafe.As[retrysafe.Notifier](s)
	p, _ := retrysafe.As[admin.Pinger](s)
	if bl, ok := retrysafe.As[storetest.BodyLimiter](s); ok && !notifies {
		// DynamoDB: no Notifier (waiters poll), and a body limit.
		sw, _ := retrysafe.As[admin.Sweeper](s)
		rc, _ := retrysafe.As[admin.ReadyChecker](s)
		return struct {
			retrysafe.Store
			admin.Pinger
			admin.Sweeper
			admin.ReadyChecker
			storetest.BodyLimiter
		}{s, p, sw, rc, bl}
	}
	if sw, ok := retrysafe.As[admin.Sweeper](s); ok {
		return struct {
			retrysafe.Store
			retrysafe.Notifier
			admin.Pinger
			admin.Sweeper
		}{s, n, p, sw}
	}
	rc, _ := retrysafe.As[admin.ReadyChecker](s)
	return struct {
		retrysafe.Store
		retrysafe.Notifier
		admin.Pinger
		admin.ReadyChecker
	}{s, n, p, rc}
}

// TestSealedUnavailable: the wrapper passes store errors through unchanged.
func TestSealedUnavailable(t *testing.T) {
	t.Parallel()
	ring := sealedRing(t, "k1")
	storetest.RunUnavailable(t, func(t *testing.T) retrysafe.Store {
		db := stores.SQLite(t).DB()
		broken, err := sqlite.New(db, sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return sealedWrap(t, broken, ring, sealed.Config{})
	})
}

// TestSealedCompleteNilResponse: a completion without a response (which a
// store keeps as an empty one) reads back through the wrapper without error.
func TestSealedCompleteNilResponse(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"memory", "sqlite", "postgres", "redis", "mysql", "dynamodb"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := sealedWrap(t, stores.All[name](t), sealedRing(t, "k1"), sealed.Config{})
			sealedComplete(t, s, "scope-a", "k", nil)
			rec, err := sealedGet(s, t.Context(), "scope-a", "k")
			if err != nil {
				t.Fatalf("Get after Complete with a nil response: %v", err)
			}
			if rec.Response != nil && (rec.Response.Status != 0 || len(rec.Response.Header) != 0 || len(rec.Response.Body) != 0) {
				t.Fatalf("Response = %+v, want nil or empty", rec.Response)
			}
		})
	}
}

// TestSealedRawStoreHoldsNoPlaintext: what every store keeps (as its own Get
// returns it) holds neither the body nor a header value in the clear, only
// the header names; and the SQLite file holds no plaintext either.
func TestSealedRawStoreHoldsNoPlaintext(t *testing.T) {
	t.Parallel()
	ring := sealedRing(t, "k1")
	for _, name := range []string{"memory", "sqlite", "postgres", "redis", "mysql", "dynamodb"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw := stores.All[name](t)
			s := sealedWrap(t, raw, ring, sealed.Config{})
			sealedComplete(t, s, "scope-a", "k", sealedPayment())

			stored, err := sealedGet(raw, t.Context(), ring.Scope("scope-a"), "k")
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(stored.Response.Body, []byte("Jane")) {
				t.Errorf("stored body holds the plaintext: %q", stored.Response.Body)
			}
			if id, ok := sealed.KeyID(stored.Response); !ok || id != "k1" {
				t.Errorf("KeyID(stored) = %q, %v; want k1, true", id, ok)
			}
			if stored.Response.Status != http.StatusCreated {
				t.Errorf("stored status = %d, want 201 (in the clear)", stored.Response.Status)
			}
			want := http.Header{sealed.MarkerHeader: {"k1"}}
			for name := range sealedPayment().Header {
				want[name] = []string{sealed.HeaderPlaceholder}
			}
			if !reflect.DeepEqual(stored.Response.Header, want) {
				t.Errorf("stored header = %q, want names with placeholders %q", stored.Response.Header, want)
			}

			rec, err := sealedGet(s, t.Context(), "scope-a", "k")
			if err != nil {
				t.Fatal(err)
			}
			sealedWantResponse(t, "Get through the wrapper", rec.Response, sealedPayment())
		})
	}
	t.Run("sqlite file", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		raw, err := sqlite.Open(t.Context(), filepath.Join(dir, "retrysafe.db"), sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		s := sealedWrap(t, raw, ring, sealed.Config{})
		for i := range 20 {
			sealedComplete(t, s, "scope-a", "k"+string(rune('a'+i)), sealedPayment())
		}
		if err := raw.Close(); err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		read, names := 0, 0
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			read += len(b)
			if bytes.Contains(b, []byte("Jane Doe")) {
				t.Errorf("%s holds the plaintext", e.Name())
			}
			if bytes.Contains(b, []byte("Location")) {
				names++
			}
		}
		if names == 0 {
			t.Fatalf("no file of %s (%d bytes) holds the header name Location: the records are not where the test looks", dir, read)
		}
	})
}
