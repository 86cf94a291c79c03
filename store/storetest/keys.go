package storetest

import (
	"strings"
	"testing"
	"time"
)

func keyScenarios() []scenario {
	return []scenario{
		{"Keys", testKeys},
	}
}

// testKeys: any key the engine accepts (printable ASCII, 1 to 255 chars)
// is stored and found exactly, including characters that are special to
// SQL (quotes, %, _), to Redis patterns (*, ?, [ ]), to paths and
// separators (/, :, \) and spaces. Each key is its own record: no two keys
// collide and no key matches another as a pattern.
func testKeys(t *testing.T, h *harness) {
	var printable strings.Builder
	for c := byte(0x20); c <= 0x7e; c++ {
		printable.WriteByte(c)
	}
	keys := []string{
		printable.String(),
		strings.Repeat("k", 255),
		strings.Repeat("*", 255),
		strings.Repeat("x", 254) + "%",
		`"quoted"`, `'single'`, `back\slash`, `\`, `\\`,
		"%", "%%", "_", "a_c", "abc",
		"*", "?", "[", "]", "[a-z]", "[!a]", "a*", "a?c", "{a}",
		" ", "  ", " leading", "trailing ", "in side",
		":", "a:b", "a:b:c", "/", "a/b", "..", "#", "$1", "^$", "|", "&", ";", "--", "/*", "=", "+", "~", "`", "@", ",",
		"A", "a", "0", "00", "0x00",
	}
	// Scopes of 64 hex chars, as the default scope is a hex SHA-256.
	scopes := []string{scope1, scope2, strings.Repeat("0", 64), strings.Repeat("f", 64)}

	tokens := map[[2]string]string{}
	for _, scope := range scopes {
		for _, key := range keys {
			p, rec := h.claimNew(scope, key, fpA, at(0))
			if rec.Key != key || rec.Scope != scope {
				t.Errorf("Claim(%q, %q) returned record identity (%q, %q)", scope, key, rec.Scope, rec.Key)
			}
			tokens[[2]string{scope, key}] = p.Token
		}
	}
	for _, scope := range scopes {
		for _, key := range keys {
			rec := h.get(scope, key, at(0))
			if rec.Key != key || rec.Scope != scope || rec.Token != tokens[[2]string{scope, key}] {
				t.Errorf("Get(%q, %q) returned %s, want its own record", scope, key, describe(rec))
			}
		}
	}

	// Completing and releasing one key leaves every other key alone.
	victim := keys[0]
	h.mustComplete(scope1, victim, tokens[[2]string{scope1, victim}], at(time.Second), sampleResponse())
	if err := h.release(scope1, "*", tokens[[2]string{scope1, "*"}]); err != nil {
		t.Fatalf("Release(%q): %v", "*", err)
	}
	h.getNotFound(scope1, "*", at(time.Second))
	for _, key := range keys {
		if key == "*" {
			continue
		}
		rec := h.get(scope1, key, at(time.Second))
		wantCompleted := key == victim
		if (rec.State == "completed") != wantCompleted {
			t.Errorf("Get(%q) after completing %q and releasing %q: state %q", key, victim, "*", rec.State)
		}
	}
}
