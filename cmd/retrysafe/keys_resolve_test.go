package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// TestKeysResolve: resolve ends only unknown outcomes, with the answer the
// operator gives (or a release), and writes one audit line.
func TestKeysResolve(t *testing.T) {
	t.Parallel()
	for _, b := range cliBackends(t)[:2] { // memory, sqlite
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			now := time.Now()
			past := now.Add(-2 * time.Minute) // claimed with a one-minute lease: ran out
			cliArrange(t, b.store,
				cliRecord{scope: aliceScope, key: "live", at: now},
				cliRecord{scope: aliceScope, key: "done", status: 201, at: now, ttl: time.Hour},
				cliRecord{scope: aliceScope, key: "stranded", at: past},
				cliRecord{scope: aliceScope, key: "stranded-2", at: past},
			)
			body := filepath.Join(t.TempDir(), "charge.json")
			if err := os.WriteFile(body, []byte(`{"charge":"ch_1"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			run := func(args ...string) (string, string, error) {
				t.Helper()
				return cliRun(t, b, keysCmdForTest, append(args, "--store", b.url)...)
			}

			for key, why := range map[string]string{"live": "lease runs until", "done": "is completed"} {
				_, _, err := run("resolve", key, "--scope", aliceScope, "--release")
				if !errors.Is(err, errResolveRefused) || !strings.Contains(err.Error(), why) {
					t.Errorf("resolve %s = %v, want a refusal saying %q", key, err, why)
				}
			}
			if rec := cliGet(t, b.store, aliceScope, "live"); rec == nil || rec.State != retrysafe.StateProcessing {
				t.Fatalf("the refused resolve changed the live record: %+v", rec)
			}

			out, audit, err := run("resolve", "stranded", "--scope", aliceScope[:12], "--complete", "--status", "201",
				"--body-file", body, "--header", "Content-Type: application/json", "--header", "Location: /charges/ch_1")
			if err != nil {
				t.Fatalf("resolve --complete: %v", err)
			}
			if !strings.Contains(out, "retries of the key get the stored 201") {
				t.Errorf("output does not say what the client gets:\n%s", out)
			}
			rec := cliGet(t, b.store, aliceScope, "stranded")
			if rec == nil || rec.State != retrysafe.StateCompleted || rec.Response.Status != 201 ||
				string(rec.Response.Body) != `{"charge":"ch_1"}` || rec.Response.Header.Get("Location") != "/charges/ch_1" {
				t.Fatalf("record after resolve --complete = %+v", rec)
			}
			var line map[string]any
			audit = audit[strings.Index(audit, "{"):] // after the memory store's note
			if err := json.Unmarshal([]byte(strings.TrimSpace(audit)), &line); err != nil {
				t.Fatalf("audit line %q is not one JSON object: %v", audit, err)
			}
			for k, want := range map[string]any{"actor": osUser(), "action": "complete", "key_sha256": scopehash.Sum("stranded")[:16],
				"audit": true, "via": "cli", "result": "done", "msg": gateway.AuditPrefix + "unknown outcome resolved",
				"state_before": "unknown", "status": float64(201), "scope": aliceScope} {
				if line[k] != want {
					t.Errorf("audit %s = %v, want %v (line %s)", k, line[k], want, audit)
				}
			}
			if strings.Contains(audit, `"stranded"`) {
				t.Errorf("the audit line holds the key itself: %s", audit)
			}

			// A second resolve of the same key: it is completed now.
			if _, _, err := run("resolve", "stranded", "--scope", aliceScope, "--release"); !errors.Is(err, errResolveRefused) {
				t.Errorf("second resolve = %v, want a refusal", err)
			}

			if _, _, err := run("resolve", "stranded-2", "--scope", aliceScope, "--release"); err != nil {
				t.Fatalf("resolve --release: %v", err)
			}
			if rec := cliGet(t, b.store, aliceScope, "stranded-2"); rec != nil {
				t.Fatalf("record after resolve --release = %+v, want none", rec)
			}
		})
	}
}

// TestKeysResolveAbandoned: a record whose owner abandoned it is an
// unknown outcome at once, lease or not.
func TestKeysResolveAbandoned(t *testing.T) {
	t.Parallel()
	b := memoryBackend(t)
	now := time.Now()
	tokens := cliArrange(t, b.store, cliRecord{scope: aliceScope, key: "gave-up", at: now})
	if err := b.store.Extend(t.Context(), &retrysafe.ExtendParams{Scope: aliceScope, Key: "gave-up", Token: tokens["gave-up"], Now: now, Abandon: true}); err != nil {
		t.Fatal(err)
	}
	out, _, err := cliRun(t, b, keysCmdForTest, "show", "gave-up", "--store", b.url)
	if err != nil || !strings.Contains(out, "processing (abandoned: outcome unknown)") {
		t.Fatalf("show of an abandoned record: %v\n%s", err, out)
	}
	if _, _, err := cliRun(t, b, keysCmdForTest, "resolve", "gave-up", "--release", "--store", b.url); err != nil {
		t.Fatalf("resolve of an abandoned record: %v", err)
	}
	if rec := cliGet(t, b.store, aliceScope, "gave-up"); rec != nil {
		t.Fatalf("record after release = %+v", rec)
	}
}

// takeoverStore takes the record over (a retry, as the gateway would)
// right after keys read it: resolve's write, fenced by the token it read,
// must then fail and change nothing.
type takeoverStore struct {
	*memory.Store
	t *testing.T
}

func (s *takeoverStore) Find(ctx context.Context, p *admin.FindParams) ([]*retrysafe.Record, error) {
	recs, err := s.Store.Find(ctx, p)
	for _, rec := range recs {
		res, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: rec.Scope, Key: rec.Key, Fingerprint: rec.Fingerprint,
			Token: retrysafe.NewToken(), Now: time.Now(), Lease: time.Minute})
		if err != nil || !res.Claimed || res.Record.Attempt != 2 {
			s.t.Errorf("takeover: %v %+v", err, res)
		}
	}
	return recs, err
}

func TestKeysResolveFenced(t *testing.T) {
	t.Parallel()
	mem := memory.New(memory.Config{JanitorInterval: -1})
	t.Cleanup(func() { _ = mem.Close() })
	ts := &takeoverStore{Store: mem, t: t}
	b := cliBackend{name: "memory", url: "memory:", store: ts,
		open: func(context.Context, string, storeurl.Options) (retrysafe.Store, func() error, error) {
			return ts, func() error { return nil }, nil
		}}
	cliArrange(t, mem, cliRecord{scope: aliceScope, key: "raced", at: time.Now().Add(-2 * time.Minute)})
	for _, args := range [][]string{{"--complete", "--status", "200"}, {"--release"}} {
		_, audit, err := cliRun(t, b, keysCmdForTest, append([]string{"resolve", "raced", "--store", "memory:"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "changed since it was read") || !strings.Contains(err.Error(), "nothing was written") {
			t.Fatalf("resolve %v of a record taken over meanwhile = %v, want a refusal", args, err)
		}
		if !strings.Contains(audit, "refused") {
			t.Errorf("audit line of the refusal: %q", audit)
		}
		rec := cliGet(t, mem, aliceScope, "raced")
		if rec == nil || rec.State != retrysafe.StateProcessing || rec.Response != nil {
			t.Fatalf("record after the refused resolve %v = %+v, want the new owner's processing record", args, rec)
		}
		// Let its lease run out again for the next round.
		mem.Delete(t.Context(), aliceScope, "raced")
		cliArrange(t, mem, cliRecord{scope: aliceScope, key: "raced", at: time.Now().Add(-2 * time.Minute)})
	}
}

func TestKeysResolveUsage(t *testing.T) {
	t.Parallel()
	b := memoryBackend(t)
	for name, args := range map[string][]string{
		"neither":              {"resolve", "k"},
		"both":                 {"resolve", "k", "--complete", "--status", "200", "--release"},
		"complete no status":   {"resolve", "k", "--complete"},
		"bad status":           {"resolve", "k", "--complete", "--status", "99"},
		"status with release":  {"resolve", "k", "--release", "--status", "200"},
		"no key":               {"resolve", "--release"},
		"resolve flag on show": {"show", "k", "--release"},
		"unstored header":      {"resolve", "k", "--complete", "--status", "200", "--header", "Set-Cookie: s=1"},
		"bad header":           {"resolve", "k", "--complete", "--status", "200", "--header", "no colon"},
		"zero ttl":             {"resolve", "k", "--complete", "--status", "200", "--ttl", "0s"},
	} {
		_, _, err := cliRun(t, b, keysCmdForTest, args...)
		var ue *usageError
		if !errors.As(err, &ue) && !strings.Contains(err.Error(), "invalid value") {
			t.Errorf("%s: err = %v, want a usage error", name, err)
		}
	}
}

// cliGet reads a record as stored (nil when absent).
func cliGet(t *testing.T, s retrysafe.Store, scope, key string) *retrysafe.Record {
	t.Helper()
	a, _ := retrysafe.As[admin.Admin](s)
	recs, err := a.Find(t.Context(), &admin.FindParams{Key: key, Scope: scope, ScopeSet: true, WithBodies: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 {
		return nil
	}
	return recs[0]
}

// TestKeysResolveEncrypted: with encryption at rest the record is kept
// under the HMAC of its scope; resolve finds it there and stores the
// answer sealed, so the caller reads it, decrypted, under its own scope.
func TestKeysResolveEncrypted(t *testing.T) {
	t.Parallel()
	b := memoryBackend(t)
	keysPath, keysText := writeKeyFile(t, "k1")
	ring, err := sealed.ParseKeyRing([]byte(keysText))
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := sealed.New(b.store, ring, sealed.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cliArrange(t, wrapped, cliRecord{scope: aliceScope, key: "sealed-1", at: time.Now().Add(-2 * time.Minute)})
	if _, _, err := cliRun(t, b, keysCmdForTest, "resolve", "sealed-1", "--encryption-keys-file", keysPath,
		"--complete", "--status", "201", "--header", "X-Charge: ch_1", "--store", "memory:"); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	rec, err := wrapped.Get(t.Context(), &retrysafe.GetParams{Scope: aliceScope, Key: "sealed-1", Now: time.Now()})
	if err != nil || rec.State != retrysafe.StateCompleted || rec.Response.Status != 201 || rec.Response.Header.Get("X-Charge") != "ch_1" {
		t.Fatalf("the caller reads %+v, %v; want the operator's answer", rec, err)
	}
	raw := cliGet(t, b.store, ring.Scope(aliceScope), "sealed-1")
	if raw == nil || raw.Response.Header.Get("X-Charge") == "ch_1" {
		t.Fatalf("stored in the clear: %+v", raw)
	}
}
