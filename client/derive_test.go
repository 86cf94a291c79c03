package client

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/retrysafetest"
)

var derivedKeyFormat = regexp.MustCompile(`^rsd_[A-Za-z0-9_-]{43}$`)

func opContext(scope, key string) context.Context {
	ctx, _, err := retrysafetest.OperationContext(context.Background(), &retrysafe.Record{Scope: scope, Key: key, Token: retrysafe.NewToken()}, time.Hour, nil)
	if err != nil {
		panic(err)
	}
	return ctx
}

func mustDerive(t *testing.T, ctx context.Context, label string) string {
	t.Helper()
	k, ok := DeriveKey(ctx, label)
	if !ok {
		t.Fatal("DeriveKey: no operation in context")
	}
	return k
}

func TestDeriveKeyIsStable(t *testing.T) {
	t.Parallel()
	// Two executions of the same operation (a retry, another instance, a
	// takeover with a new owner token) derive the same key.
	a := mustDerive(t, opContext("tenant-a", "8e03978e-40d5-43e8-bc93-6894a57f9324"), "psp-charge")
	b := mustDerive(t, opContext("tenant-a", "8e03978e-40d5-43e8-bc93-6894a57f9324"), "psp-charge")
	if a != b {
		t.Errorf("same operation and label derived %q and %q", a, b)
	}
	if !derivedKeyFormat.MatchString(a) {
		t.Errorf("derived key %q has the wrong format", a)
	}
	// A fixed vector, so a change of the derivation is never silent.
	const want = "rsd_XVuuyM3TyaKt63fa6Bkp4P8KlsInqaWfPOo-LBNZNvU"
	if got := mustDerive(t, opContext("tenant-a", "order-1"), "psp-charge"); got != want {
		t.Errorf("DeriveKey = %q, want %q", got, want)
	}
}

func TestDeriveKeySeparates(t *testing.T) {
	t.Parallel()
	type input struct{ scope, key, label string }
	inputs := map[string]input{
		"base":                 {"tenant-a", "order-1", "psp-charge"},
		"other scope":          {"tenant-b", "order-1", "psp-charge"},
		"other key":            {"tenant-a", "order-2", "psp-charge"},
		"other label":          {"tenant-a", "order-1", "send-receipt"},
		"empty label":          {"tenant-a", "order-1", ""},
		"scope/key boundary":   {"tenant-ao", "rder-1", "psp-charge"},
		"key/label boundary":   {"tenant-a", "order-1p", "sp-charge"},
		"fields swapped":       {"order-1", "tenant-a", "psp-charge"},
		"label moved into key": {"tenant-a", "order-1psp-charge", ""},
		"empty everything":     {"", "", ""},
		"only a scope":         {"tenant-a", "", ""},
	}
	seen := map[string]string{}
	for name, in := range inputs {
		k := mustDerive(t, opContext(in.scope, in.key), in.label)
		if other, dup := seen[k]; dup {
			t.Errorf("%q and %q derive the same key %q", name, other, k)
		}
		seen[k] = name
	}
}

func TestDeriveKeyDoesNotLeakTheIncomingKey(t *testing.T) {
	t.Parallel()
	const incoming = "order-2026-11-29-0001"
	ctx := opContext("tenant-a", incoming)
	plain := mustDerive(t, ctx, "psp-charge")
	for _, part := range []string{incoming, "order", "tenant-a", "psp-charge"} {
		if strings.Contains(plain, part) {
			t.Errorf("derived key %q contains %q", plain, part)
		}
	}
	s1, ok1 := DeriveKeyWithSecret(ctx, []byte("secret one"), "psp-charge")
	s2, ok2 := DeriveKeyWithSecret(ctx, []byte("secret two"), "psp-charge")
	s1again, _ := DeriveKeyWithSecret(ctx, []byte("secret one"), "psp-charge")
	if !ok1 || !ok2 {
		t.Fatal("DeriveKeyWithSecret: no operation in context")
	}
	if s1 == plain || s2 == plain || s1 == s2 {
		t.Errorf("secrets do not separate: none %q, one %q, two %q", plain, s1, s2)
	}
	if s1 != s1again {
		t.Errorf("same secret derived %q and %q", s1, s1again)
	}
	for _, k := range []string{s1, s2} {
		if !derivedKeyFormat.MatchString(k) {
			t.Errorf("derived key %q has the wrong format", k)
		}
	}
}

func TestDeriveKeyWithoutOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if k, ok := DeriveKey(ctx, "psp-charge"); ok || k != "" {
		t.Errorf("DeriveKey without operation = %q, %v; want \"\", false", k, ok)
	}
	if k, ok := DeriveKeyWithSecret(ctx, []byte("s"), "psp-charge"); ok || k != "" {
		t.Errorf("DeriveKeyWithSecret without operation = %q, %v; want \"\", false", k, ok)
	}
	if got := WithDerivedKey(ctx, "psp-charge"); got != ctx {
		t.Error("WithDerivedKey without operation changed the context")
	}
}

func TestTransportSendsTheDerivedKey(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(502)
			return
		}
		w.WriteHeader(201)
	})
	send := func() string {
		// One execution of the incoming operation, calling the provider.
		ctx := WithDerivedKey(opContext("tenant-a", "order-1"), "psp-charge")
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"amount":100}`))
		var sleeps []time.Duration
		resp, err := srv.transport(&sleeps).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return KeyFromResponse(resp)
	}
	first, second := send(), send()
	want := mustDerive(t, opContext("tenant-a", "order-1"), "psp-charge")
	keys, _ := srv.seen()
	if first != want || second != want || len(keys) != 3 {
		t.Fatalf("keys used %q, %q; want %q", first, second, want)
	}
	for i, k := range keys {
		if k != want {
			t.Errorf("request %d carried %q, want %q", i+1, k, want)
		}
	}
}

func FuzzDeriveKey(f *testing.F) {
	f.Add("tenant-a", "8e03978e-40d5-43e8-bc93-6894a57f9324", "psp-charge", []byte(nil))
	f.Add("", "", "", []byte("secret"))
	f.Add("\x00", "\xff\xfe", "ключ", []byte{0})
	f.Add(strings.Repeat("s", 300), strings.Repeat("k", 255), strings.Repeat("l", 1000), []byte(strings.Repeat("x", 100)))
	f.Fuzz(func(t *testing.T, scope, key, label string, secret []byte) {
		ctx := opContext(scope, key)
		k, ok := DeriveKeyWithSecret(ctx, secret, label)
		if !ok {
			t.Fatal("no operation in context")
		}
		if !derivedKeyFormat.MatchString(k) || validKey(k) != "" {
			t.Fatalf("derived key %q has the wrong format", k)
		}
		if parsed, err := retrysafe.ParseKey(k); err != nil || parsed != k || encodeKey(k) != k {
			t.Fatalf("derived key %q is not sent bare: ParseKey = %q, %v", k, parsed, err)
		}
		if again, _ := DeriveKeyWithSecret(opContext(scope, key), secret, label); again != k {
			t.Fatalf("not deterministic: %q then %q", k, again)
		}
		if len(key) >= 8 && strings.Contains(k, key) {
			t.Fatalf("derived key %q contains the incoming key %q", k, key)
		}
		if k2, _ := DeriveKeyWithSecret(ctx, secret, label+"x"); k2 == k {
			t.Fatalf("labels %q and %q derive the same key", label, label+"x")
		}
	})
}
