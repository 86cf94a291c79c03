package retrysafe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retrysafe/retrysafe/internal/canonicaljson"
	"github.com/retrysafe/retrysafe/internal/httpmethod"
)

type fpInput struct {
	method, path, query string
	body                []byte
	ignore              []string
}

func (in fpInput) fingerprint() string {
	return Fingerprint(in.method, in.path, in.query, in.body, in.ignore)
}

const paymentJSON = `{"amount":1999,"currency":"eur","customer":"cus_9s6XKzkNRiz8i3","description":"Order #4711","metadata":{"order_id":"4711","requestedAt":"2026-11-29T18:00:00Z"},"payment_method":"pm_card_visa","confirm":true,"capture_method":"automatic","receipt_email":"jenny.rosen@example.com","statement_descriptor":"ACME SHOP"}`

func TestFingerprintEqual(t *testing.T) {
	t.Parallel()
	post := func(query, body string) fpInput {
		return fpInput{method: "POST", path: "/v1/payments", query: query, body: []byte(body)}
	}
	tests := map[string]struct{ a, b fpInput }{
		"identical":          {post("", paymentJSON), post("", paymentJSON)},
		"method case":        {fpInput{method: "post", path: "/p"}, fpInput{method: "POST", path: "/p"}},
		"query order":        {post("b=2&a=1", ""), post("a=1&b=2", "")},
		"query names":        {post("b=1&a=2&b=2", ""), post("a=2&b=1&b=2", "")},
		"query escaping":     {post("a=%41%20b", ""), post("a=A+b", "")},
		"query empty value":  {post("a", ""), post("a=", "")},
		"query empty":        {post("", ""), post("&", "")},
		"empty and nil body": {fpInput{method: "POST", path: "/p", body: []byte{}}, fpInput{method: "POST", path: "/p"}},
		"json key order":     {post("", `{"amount":5,"currency":"eur"}`), post("", `{"currency":"eur","amount":5}`)},
		"json whitespace":    {post("", `{"amount":5}`), post("", "{ \"amount\" : 5 }\n")},
		"json numbers":       {post("", `{"amount":5}`), post("", `{"amount":5.0}`)},
		"json escapes":       {post("", `{"name":"\u00e9"}`), post("", `{"name":"é"}`)},
		"ignored member": {
			fpInput{method: "POST", path: "/p", body: []byte(`{"a":1,"meta":{"at":"x"}}`), ignore: []string{"/meta/at"}},
			fpInput{method: "POST", path: "/p", body: []byte(`{"meta":{"at":"y"},"a":1}`), ignore: []string{"/meta/at"}},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if a, b := tt.a.fingerprint(), tt.b.fingerprint(); a != b {
				t.Fatalf("fingerprints differ:\n%+v: %s\n%+v: %s", tt.a, a, tt.b, b)
			}
		})
	}
}

func TestFingerprintDiffer(t *testing.T) {
	t.Parallel()
	req := func(method, path, query, body string) fpInput {
		return fpInput{method: method, path: path, query: query, body: []byte(body)}
	}
	tests := map[string]struct{ a, b fpInput }{
		"method":               {req("POST", "/p", "", ""), req("PUT", "/p", "", "")},
		"path":                 {req("POST", "/p/1", "", ""), req("POST", "/p/2", "", "")},
		"path case":            {req("POST", "/P", "", ""), req("POST", "/p", "", "")},
		"method path boundary": {req("POST", "/x", "", ""), req("POST/", "x", "", "")},
		"path query boundary":  {req("POST", "/p?a=1", "", ""), req("POST", "/p", "a=1", "")},
		"query value":          {req("POST", "/p", "a=1", ""), req("POST", "/p", "a=2", "")},
		"query name value":     {req("POST", "/p", "a=bc", ""), req("POST", "/p", "ab=c", "")},
		"query split":          {req("POST", "/p", "a=b%26c=d", ""), req("POST", "/p", "a=b&c=d", "")},
		"query count":          {req("POST", "/p", "a=1", ""), req("POST", "/p", "a=1&a=1", "")},
		"query repeated order": {req("POST", "/p", "acct=1&acct=2", ""), req("POST", "/p", "acct=2&acct=1", "")},
		"path escaped slash":   {req("POST", "/orders/a%2Fb/refunds", "", ""), req("POST", "/orders/a/b/refunds", "", "")},
		"json folded names":    {req("POST", "/p", "", `{"amount":1,"Amount":1000}`), req("POST", "/p", "", `{"Amount":1000,"amount":1}`)},
		"query vs body":        {req("POST", "/p", "a=1", ""), req("POST", "/p", "", "a=1")},
		"raw query escaping":   {req("POST", "/p", "a=%zz", ""), req("POST", "/p", "a=%ZZ", "")},
		"raw vs parsed query":  {req("POST", "/p", "a=%zz", ""), req("POST", "/p", "query-raw", "")},
		"semicolon query":      {req("POST", "/p", "a=1;b=2", ""), req("POST", "/p", "a=1&b=2", "")},
		"json amount":          {req("POST", "/p", "", `{"amount":5}`), req("POST", "/p", "", `{"amount":50}`)},
		"json big numbers":     {req("POST", "/p", "", `12345678901234567890`), req("POST", "/p", "", `12345678901234567891`)},
		"json vs raw":          {req("POST", "/p", "", `{"a":1}`), req("POST", "/p", "", `{"a":1} x`)},
		"raw whitespace":       {req("POST", "/p", "", "hello"), req("POST", "/p", "", "hello ")},
		"raw bytes":            {req("POST", "/p", "", "a=1&b=2"), req("POST", "/p", "", "b=2&a=1")},
		"duplicate keys raw":   {req("POST", "/p", "", `{"a":1,"a":2}`), req("POST", "/p", "", `{"a":2,"a":1}`)},
		"empty vs empty json":  {req("POST", "/p", "", ""), req("POST", "/p", "", `""`)},
		"ignore elsewhere": {
			fpInput{method: "POST", path: "/p", body: []byte(`{"a":1,"meta":{"at":"x"}}`), ignore: []string{"/meta/id"}},
			fpInput{method: "POST", path: "/p", body: []byte(`{"a":1,"meta":{"at":"y"}}`), ignore: []string{"/meta/id"}},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if a, b := tt.a.fingerprint(), tt.b.fingerprint(); a == b {
				t.Fatalf("fingerprints equal (%s):\n%+v\n%+v", a, tt.a, tt.b)
			}
		})
	}
}

func TestFingerprintFormat(t *testing.T) {
	t.Parallel()
	fp := Fingerprint("POST", "/v1/payments", "", []byte(paymentJSON), nil)
	if b, err := hex.DecodeString(fp); err != nil || len(b) != sha256.Size || strings.ToLower(fp) != fp {
		t.Fatalf("Fingerprint = %q; want 64 lowercase hex digits", fp)
	}
}

func ExampleFingerprint() {
	ignore := []string{"/metadata/requestedAt"}
	first := Fingerprint("POST", "/v1/payments", "expand=customer",
		[]byte(`{"amount": 1999, "currency": "eur", "metadata": {"requestedAt": "18:00:00"}}`), ignore)
	retry := Fingerprint("post", "/v1/payments", "expand=customer",
		[]byte(`{"currency":"eur","amount":1999.0,"metadata":{"requestedAt":"18:00:05"}}`), ignore)
	other := Fingerprint("POST", "/v1/payments", "expand=customer",
		[]byte(`{"amount": 2999, "currency": "eur", "metadata": {"requestedAt": "18:00:00"}}`), ignore)
	fmt.Println("retry matches:", first == retry)
	fmt.Println("other amount matches:", first == other)
	// Output:
	// retry matches: true
	// other amount matches: false
}

// TestFingerprintReference computes fingerprints the long way (every field
// framed by hand, one SHA-256 over all of it) for bodies of every size
// class the implementation hashes differently: empty, small, just under
// and over the chunk size (hashChunk), raw and canonical JSON.
func TestFingerprintReference(t *testing.T) {
	t.Parallel()
	jsonOf := func(n int) []byte { // a JSON string of about n bytes, with spaces
		return []byte(` "` + strings.Repeat("x", max(n-4, 0)) + `" `)
	}
	for _, n := range []int{0, 1, 21, hashChunk - 200, hashChunk - 1, hashChunk, hashChunk + 1, 3*hashChunk + 7} {
		for _, body := range [][]byte{[]byte(strings.Repeat("r", n)), jsonOf(n)} {
			if got, want := Fingerprint("post", "/p", "a=1", body, nil), referenceFingerprintOf("post", "/p", "a=1", body); got != want {
				t.Errorf("body of %d bytes (%.10q...): Fingerprint = %s, reference %s", len(body), body, got, want)
			}
		}
	}
}

// referenceFingerprintOf is Fingerprint the long way, as documented: every
// field framed by hand, the query through url.ParseQuery (even an empty
// one), one sha256.Sum256 over the whole, encoding/hex.
func referenceFingerprintOf(method, path, rawQuery string, body []byte) string {
	field := func(b []byte, s string) []byte {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		return append(b, s...)
	}
	var b []byte
	b = field(b, fingerprintVersion)
	b = field(b, httpmethod.Canonical(method))
	b = field(b, path)
	if q, err := url.ParseQuery(rawQuery); err == nil {
		names := slices.Sorted(maps.Keys(q))
		n := 0
		for _, name := range names {
			n += len(q[name])
		}
		b = field(b, "query")
		b = binary.BigEndian.AppendUint64(b, uint64(n))
		for _, name := range names {
			for _, v := range q[name] {
				b = field(b, name)
				b = field(b, v)
			}
		}
	} else {
		b = field(b, "query-raw")
		b = field(b, rawQuery)
	}
	kind, data := "body-raw", body
	if len(body) == 0 {
		kind, data = "body-empty", nil
	} else if canon, err := canonicaljson.Append(context.Background(), nil, body, nil); err == nil {
		kind, data = "body-json", canon
	}
	b = field(b, kind)
	b = binary.BigEndian.AppendUint64(b, uint64(len(data)))
	sum := sha256.Sum256(append(b, data...))
	return hex.EncodeToString(sum[:])
}

// FuzzFingerprintReference checks Fingerprint against the long way for any
// request; the empty query's shortcut is compared with url.ParseQuery's
// result.
func FuzzFingerprintReference(f *testing.F) {
	f.Add("POST", "/orders", "", []byte(`{"sku":"abc","qty":1}`))
	f.Add("post", "/v1/payments/refunds/long/enough/path", "b=2&a=1&a=0", []byte(`{"b":1, "a":[1,2.0]}`))
	f.Add("PATCH", "/a", "%zz", []byte("raw"))
	f.Add("PUT", "", "&&", []byte(nil))
	f.Add("POST", "/x", ";", []byte(`"\u00e9"`))
	f.Fuzz(func(t *testing.T, method, path, rawQuery string, body []byte) {
		if got, want := Fingerprint(method, path, rawQuery, body, nil), referenceFingerprintOf(method, path, rawQuery, body); got != want {
			t.Fatalf("Fingerprint(%q, %q, %q, %q) = %s, want %s", method, path, rawQuery, body, got, want)
		}
	})
}

// countingContext is a context that never reports Done by closing its
// channel but whose Err reports context.Canceled from call after+1 on, and
// counts the calls: it shows how often work checks its context and that it
// stops at the first check that sees the end.
type countingContext struct {
	context.Context
	done  chan struct{}
	after int64
	calls atomic.Int64
}

func newCountingContext(after int64) *countingContext {
	return &countingContext{Context: context.Background(), done: make(chan struct{}), after: after}
}

func (c *countingContext) Done() <-chan struct{} { return c.done }

func (c *countingContext) Err() error {
	if c.calls.Add(1) > c.after {
		return context.Canceled
	}
	return nil
}

// TestFingerprintStopsWhenContextEnds: fingerprinting a large body, JSON
// or raw, checks the context at least every 2*hashChunk bytes and stops
// at the first check that finds it ended, returning its error.
func TestFingerprintStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	bodies := map[string][]byte{
		"json": []byte(`{"note":"` + strings.Repeat(`abcdefgh\n\u00e9é`, size/20) + `"}`),
		"raw":  bytes.Repeat([]byte("amount=5&"), size/9),
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// Not ended: the same fingerprint as Fingerprint's.
			ctx := newCountingContext(math.MaxInt64)
			fp, err := fingerprint(ctx, "POST", "/p", "", body, nil)
			if want := Fingerprint("POST", "/p", "", body, nil); err != nil || fp != want {
				t.Fatalf("fingerprint with a live context = %q, %v; want Fingerprint's %q", fp, err, want)
			}
			checks := ctx.calls.Load()
			if min := int64(len(body) / (2 * hashChunk)); checks < min {
				t.Fatalf("context checked %d times for %d bytes; want at least %d", checks, len(body), min)
			}
			// Ended after a few checks: stops at the next one.
			for _, after := range []int64{0, checks / 2, checks - 1} {
				ctx := newCountingContext(after)
				fp, err := fingerprint(ctx, "POST", "/p", "", body, nil)
				if !errors.Is(err, context.Canceled) || fp != "" {
					t.Fatalf("context ended after %d of %d checks: fingerprint = %q, %v; want context.Canceled", after, checks, fp, err)
				}
				if got := ctx.calls.Load(); got != after+1 {
					t.Fatalf("context ended after %d of %d checks: checked %d times; want it to stop at the first that failed", after, checks, got)
				}
			}
		})
	}
}

// TestValidatePointer checks the check on the pointers
// Config.IgnoreFields takes (canonicaljson tests the rules in full).
func TestValidatePointer(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "/", "/meta/requestedAt", "/items/0/note", "/a~0b/c~1d"} {
		if err := validatePointer(p); err != nil {
			t.Errorf("validatePointer(%q) = %v; want nil", p, err)
		}
	}
	for _, p := range []string{"a/b", "/a~", "/a~2", "/\xff", "#/a"} {
		err := validatePointer(p)
		if err == nil || !strings.HasPrefix(err.Error(), "retrysafe: invalid JSON pointer") {
			t.Errorf("validatePointer(%q) = %v; want a retrysafe: invalid JSON pointer error", p, err)
		}
	}
}
