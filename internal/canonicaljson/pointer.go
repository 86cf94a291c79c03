package canonicaljson

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// ValidatePointer reports whether p is a syntactically valid JSON Pointer
// (RFC 6901): either "" (the whole document) or a sequence of reference
// tokens, each prefixed by '/', in which '~' appears only in the escapes ~0
// ('~') and ~1 ('/'). p must be valid UTF-8.
func ValidatePointer(p string) error {
	if p == "" {
		return nil
	}
	if p[0] != '/' {
		return fmt.Errorf("invalid JSON pointer %q: must be empty or start with '/'", p)
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("invalid JSON pointer %q: not valid UTF-8", p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] != '~' {
			continue
		}
		if i+1 >= len(p) || (p[i+1] != '0' && p[i+1] != '1') {
			return fmt.Errorf("invalid JSON pointer %q: '~' at position %d must be followed by 0 or 1 (~0 is '~', ~1 is '/')", p, i)
		}
		i++
	}
	return nil
}

// validatePointers returns the error of the first invalid pointer in
// ignore.
func validatePointers(ignore []string) error {
	for _, ptr := range ignore {
		if err := ValidatePointer(ptr); err != nil {
			return err
		}
	}
	return nil
}

// nextToken splits the first reference token, unescaped, off a valid
// non-empty pointer.
func nextToken(ptr string) (tok, rest string) {
	tok = ptr[1:]
	if i := strings.IndexByte(tok, '/'); i >= 0 {
		tok, rest = tok[:i], tok[i:]
	}
	if strings.IndexByte(tok, '~') >= 0 {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
	}
	return tok, rest
}

// arrayIndex parses an RFC 6901 array index: 0 or digits without a leading
// zero.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 9 || (tok[0] == '0' && len(tok) > 1) {
		return 0, false
	}
	i := 0
	for j := 0; j < len(tok); j++ {
		c := tok[j]
		if c < '0' || c > '9' {
			return 0, false
		}
		i = i*10 + int(c-'0')
	}
	return i, true
}
