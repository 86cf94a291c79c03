package sealed_test

import (
	"bytes"
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/store/sealed"
)

func TestParseKeyRing(t *testing.T) {
	t.Parallel()
	a, b, h := newKey("2026-06"), newKey("2026-11"), newKey(sealed.HMACKeyID)
	padless := keyLine(h) + "\n" + b.ID + ":" + base64.RawStdEncoding.EncodeToString(b.Secret)
	valid := map[string]struct {
		file string
		ids  []string
	}{
		"one per line, comments": {"# keys\n" + keyLine(h) + "\n" + keyLine(a) + "  # the old one\n\n" + keyLine(b) + "\n", []string{"2026-06", "2026-11"}},
		"CRLF":                   {keyLine(a) + "\r\n" + keyLine(b) + "\r\n" + keyLine(h) + "\r\n", []string{"2026-06", "2026-11"}},
		"commas on one line":     {keyLine(a) + "," + keyLine(h) + "," + keyLine(b), []string{"2026-06", "2026-11"}},
		"spaces on one line":     {keyLine(h) + " " + keyLine(a) + " \t" + keyLine(b), []string{"2026-06", "2026-11"}},
		"base64 without padding": {padless, []string{"2026-11"}},
	}
	for name, c := range valid {
		t.Run(name, func(t *testing.T) {
			ring, err := sealed.ParseKeyRing([]byte(c.file))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ring.IDs(), c.ids) || ring.Newest() != c.ids[len(c.ids)-1] {
				t.Fatalf("IDs = %v, Newest = %q; want %v, the last one newest", ring.IDs(), ring.Newest(), c.ids)
			}
		})
	}

	short := "short:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 16))
	invalid := map[string]struct {
		file, want string
	}{
		"empty":                 {"", "no keys"},
		"only comments":         {"# nothing yet\n   \n", "no keys"},
		"no colon":              {base64.StdEncoding.EncodeToString(a.Secret), "line 1: an entry has no ':'"},
		"empty id":              {":" + base64.StdEncoding.EncodeToString(a.Secret), "empty key id"},
		"bad id character":      {"2026/06:" + base64.StdEncoding.EncodeToString(a.Secret), `character '/'`},
		"id too long":           {strings.Repeat("k", 65) + ":" + base64.StdEncoding.EncodeToString(a.Secret), "longer than 64"},
		"not base64":            {"k1:not*base64!", `key "k1": the secret is not standard base64`},
		"url-safe base64":       {"k1:" + strings.Repeat("_", 43), "not standard base64"},
		"16-byte key":           {short, "is 16 bytes, want 32"},
		"line number":           {"# header\n" + keyLine(a) + "\nk2:abc\n", "line 3:"},
		"duplicate id":          {keyLine(a) + "\n" + a.ID + ":" + base64.StdEncoding.EncodeToString(b.Secret), `key id "2026-06" appears twice`},
		"same secret twice":     {keyLine(a) + "\nother:" + base64.StdEncoding.EncodeToString(a.Secret), "have the same secret"},
		"hex instead of base64": {"k1:" + strings.Repeat("ab", 32), "bytes, want 32"},
		"no hmac entry":         {keyLine(a) + "\n" + keyLine(b), "no hmac entry: add one line hmac:BASE64"},
		"only the hmac entry":   {keyLine(h), "no encryption key"},
		"two hmac entries":      {keyLine(h) + "\n" + keyLine(a) + "\nhmac:" + base64.StdEncoding.EncodeToString(b.Secret), `key id "hmac" appears twice`},
		"hmac secret reused":    {keyLine(h) + "\nk1:" + base64.StdEncoding.EncodeToString(h.Secret), "have the same secret"},
	}
	for name, c := range invalid {
		t.Run(name, func(t *testing.T) {
			_, err := sealed.ParseKeyRing([]byte(c.file))
			if err == nil {
				t.Fatalf("ParseKeyRing(%q) succeeded", c.file)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
			for _, k := range []sealed.Key{a, b, h} {
				if s := base64.StdEncoding.EncodeToString(k.Secret); strings.Contains(err.Error(), s[:16]) {
					t.Fatalf("error %q quotes a secret", err)
				}
			}
		})
	}
}

func TestNewKeyRing(t *testing.T) {
	t.Parallel()
	if _, err := sealed.NewKeyRing(); err == nil {
		t.Error("NewKeyRing() with no keys succeeded")
	}
	if _, err := sealed.NewKeyRing(sealed.Key{ID: "k", Secret: make([]byte, 24)}); err == nil || !strings.Contains(err.Error(), "24 bytes, want 32") {
		t.Errorf("a 24-byte key: %v", err)
	}
}
