package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// testHMACSecret is the hmac entry of every key file writeKeyFile writes:
// one deployment keeps one across rotations.
var testHMACSecret = func() []byte {
	b := make([]byte, sealed.KeySize)
	_, _ = rand.Read(b)
	return b
}()

// writeKeyFile writes a key file with fresh keys of the given ids (and
// the hmac entry) and returns its path and contents.
func writeKeyFile(t *testing.T, ids ...string) (string, string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# test keys, oldest first\n")
	b.WriteString(sealed.HMACKeyID + ":" + base64.StdEncoding.EncodeToString(testHMACSecret) + "\n")
	for _, id := range ids {
		secret := make([]byte, sealed.KeySize)
		_, _ = rand.Read(secret)
		b.WriteString(id + ":" + base64.StdEncoding.EncodeToString(secret) + "\n")
	}
	path := filepath.Join(t.TempDir(), "keys.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, b.String()
}

func TestLoadKeyRing(t *testing.T) {
	t.Parallel()
	path, text := writeKeyFile(t, "k1", "k2")
	env := func(v string) func(string) string {
		return func(name string) string {
			if name == encryptionKeysEnv {
				return v
			}
			return ""
		}
	}
	for name, c := range map[string]struct {
		path, env string
		newest    string // "" : no ring
		err       string
	}{
		"neither":    {},
		"file":       {path: path, newest: "k2"},
		"env":        {env: text, newest: "k2"},
		"env commas": {env: strings.ReplaceAll(strings.TrimPrefix(text, "# test keys, oldest first\n"), "\n", ","), newest: "k2"},
		"both":       {path: path, env: text, err: "keys are given twice"},
		"no file":    {path: path + ".missing", err: "--encryption-keys-file"},
		"bad file":   {path: writeText(t, "k1:short\n"), err: "line 1"},
		"bad env":    {env: "k1", err: encryptionKeysEnv + ": line 1: an entry has no ':'"},
	} {
		t.Run(name, func(t *testing.T) {
			ring, err := loadKeyRing(c.path, env(c.env))
			switch {
			case c.err != "":
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one that says %q", err, c.err)
				}
			case err != nil:
				t.Fatal(err)
			case c.newest == "" && ring != nil:
				t.Fatalf("got a ring %v, want none", ring.IDs())
			case c.newest != "" && (ring == nil || ring.Newest() != c.newest):
				t.Fatalf("got ring %v, want newest %s", ring, c.newest)
			}
		})
	}
}

func writeText(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "file.txt")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestKeysShowEncrypted: show without keys says the response is encrypted
// and with which key, and never prints the ciphertext as the body; with the
// keys it prints the decrypted headers and body; with other keys it says
// why it cannot decrypt.
func TestKeysShowEncrypted(t *testing.T) {
	t.Parallel()
	b := memoryBackend(t)
	keysPath, keysText := writeKeyFile(t, "k-old", "k-new")
	ring, err := sealed.ParseKeyRing([]byte(keysText))
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := sealed.New(b.store, ring, sealed.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cliArrange(t, wrapped, cliRecord{scope: aliceScope, key: "pay-1", status: 201, at: time.Now(), ttl: time.Hour})
	otherKeys, _ := writeKeyFile(t, "k-other")
	plaintext := "body-of-pay-1"

	show := func(args ...string) string {
		t.Helper()
		// The scope as stored (and as keys list shows it): the HMAC.
		out, _, err := cliRun(t, b, keysCmdForTest, append([]string{"show", "pay-1", "--scope", ring.Scope(aliceScope)}, args...)...)
		if err != nil {
			t.Fatalf("keys show %v: %v", args, err)
		}
		return out
	}
	for _, args := range [][]string{nil, {"--bodies"}, {"--bodies", "--json"}} {
		out := show(args...)
		for _, want := range []string{"k-new", "Content-Type", encryptionKeysEnv} {
			if !strings.Contains(out, want) {
				t.Errorf("show %v without keys lacks %q:\n%s", args, want, out)
			}
		}
		if strings.Contains(out, plaintext) || strings.Contains(out, "application/json") {
			t.Errorf("show %v without keys printed plaintext:\n%s", args, out)
		}
		if strings.Contains(out, "bytes, binary") || strings.Contains(out, "bodyBase64") {
			t.Errorf("show %v without keys printed the ciphertext as a body:\n%s", args, out)
		}
	}
	var j keysJSONRecord
	if err := json.Unmarshal([]byte(show("--json")), &j); err != nil {
		t.Fatal(err)
	}
	if j.Encrypted == nil || j.Encrypted.KeyID != "k-new" || j.Body != nil {
		t.Errorf("--json without keys: encrypted = %+v, body = %v", j.Encrypted, j.Body)
	}
	if _, ok := j.Headers[sealed.MarkerHeader]; ok || len(j.Headers) == 0 {
		t.Errorf("--json without keys: headers %q; want the answer's names, without the marker", j.Headers)
	}

	out := show("--bodies", "--encryption-keys-file", keysPath)
	for _, want := range []string{plaintext, "Content-Type: application/json"} {
		if !strings.Contains(out, want) {
			t.Errorf("show with the keys lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "encrypted") {
		t.Errorf("show with the keys still says encrypted:\n%s", out)
	}

	out = show("--bodies", "--encryption-keys-file", otherKeys)
	for _, want := range []string{"k-new", "cannot decrypt", "not in the key ring"} {
		if !strings.Contains(out, want) {
			t.Errorf("show with other keys lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, plaintext) {
		t.Errorf("show with other keys printed plaintext:\n%s", out)
	}

	_, _, err = cliRun(t, b, keysCmdForTest, "show", "pay-1", "--encryption-keys-file", writeText(t, "nonsense\n"))
	if err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("show with a bad key file: %v", err)
	}
}

// TestServeEncrypted runs serve with --encryption-keys-file on a SQLite
// file: the retry replays the first answer, the file holds no plaintext,
// and a gateway started on the same file without the keys, or with
// another hmac entry, refuses to start (it would find none of the records,
// kept under the HMAC of their scope) and never forwards the retry.
func TestServeEncrypted(t *testing.T) {
	t.Parallel()
	up := newChargeUpstream(t, nil)
	dir := t.TempDir()
	storeURL := "sqlite:" + filepath.Join(dir, "records.db")
	keysPath, _ := writeKeyFile(t, "k1")

	serve := func(t *testing.T, extra ...string) (string, func()) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		var stderr lockedBuffer
		code := make(chan int, 1)
		go func() {
			code <- run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "off",
				"--upstream", up.URL, "--store", storeURL, "--log-format", "text"}, extra...), pw, &stderr)
			pw.Close()
		}()
		sc := bufio.NewScanner(pr)
		proxyURL := ""
		for proxyURL == "" && sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "listening on "); ok {
				proxyURL = strings.TrimSuffix(strings.Fields(rest)[0], ",")
			}
		}
		go func() { _, _ = io.Copy(io.Discard, pr) }()
		if proxyURL == "" {
			cancel()
			t.Fatalf("no address printed; stderr:\n%s", &stderr)
		}
		return proxyURL, func() {
			cancel()
			if c := <-code; c != 0 {
				t.Errorf("serve exited %d; stderr:\n%s", c, &stderr)
			}
		}
	}
	ctx := t.Context()

	proxy, stop := serve(t, "--encryption-keys-file", keysPath)
	first, err := post(ctx, proxy+"/payments", "enc-1", `{"amount":1}`)
	if err != nil || first.status != 201 {
		t.Fatalf("POST = %+v, %v", first, err)
	}
	again, err := post(ctx, proxy+"/payments", "enc-1", `{"amount":1}`)
	if err != nil || again.status != 201 || again.body != first.body || again.header.Get(retrysafe.HeaderReplayed) != "true" {
		t.Fatalf("retry = %+v, %v; want the replay of %+v", again, err, first)
	}
	stop()

	raw, closeRaw, err := storeurl.Open(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := raw.(admin.Admin).List(ctx, &admin.ListParams{WithBodies: true})
	closeRaw()
	recs = slices.DeleteFunc(recs, func(r *retrysafe.Record) bool { return r.Scope == sealed.CheckScope })
	if err != nil || len(recs) != 1 {
		t.Fatalf("List = %d records besides the check record, %v", len(recs), err)
	}
	if id, ok := sealed.KeyID(recs[0].Response); !ok || id != "k1" || bytes.Contains(recs[0].Response.Body, []byte(first.body)) {
		t.Fatalf("stored response: KeyID %q %v, body %q; want sealed with k1", id, ok, recs[0].Response.Body)
	}

	// Without the keys (even with --fail-open), or with another hmac
	// entry, the gateway would find none of the stored records: it
	// refuses to start, and nothing is forwarded.
	otherHMAC := writeText(t, "hmac:"+base64.StdEncoding.EncodeToString(make([]byte, sealed.KeySize))+"\nk1:"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, sealed.KeySize))+"\n")
	for _, tc := range []struct {
		extra []string
		want  string
	}{
		{nil, "no key ring is configured"},
		{[]string{"--fail-open"}, "no key ring is configured"},
		{[]string{"--encryption-keys-file", otherHMAC}, "another hmac key"},
	} {
		calls := up.calls.Load()
		var stdout, stderr lockedBuffer
		code := run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "off",
			"--upstream", up.URL, "--store", storeURL}, tc.extra...), &stdout, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Fatalf("serve %v over encrypted records: exit %d, stderr:\n%s\nwant a refusal saying %q", tc.extra, code, &stderr, tc.want)
		}
		if n := up.calls.Load(); n != calls {
			t.Fatalf("serve %v reached the upstream", tc.extra)
		}
	}
}

func TestServeEncryptionUsage(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "memory:", "--encryption-accept-plaintext"}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "--encryption-accept-plaintext needs keys") {
		t.Errorf("exit %d, stderr:\n%s", code, &stderr)
	}
	stderr.Reset()
	code = run(context.Background(), []string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "memory:", "--encryption-keys-file", writeText(t, "k1:AAAA\n")}, &stdout, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "line 1") || !strings.Contains(stderr.String(), "bytes, want 32") {
		t.Errorf("exit %d, stderr:\n%s", code, &stderr)
	}
}
