package retrysafe

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/internal/keyquote"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	k255 := strings.Repeat("k", 255)
	k256 := strings.Repeat("k", 256)
	tests := map[string]struct {
		in      string
		want    string
		wantErr string // substring of the KeyError reason; "" means success
	}{
		"bare token":                {in: "abc", want: "abc"},
		"bare uuid":                 {in: "8e03978e-40d5-43e8-bc93-6894a57f9324", want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		"quoted":                    {in: `"abc"`, want: "abc"},
		"quoted uuid":               {in: `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		"quoted with spaces":        {in: `"a b c"`, want: "a b c"},
		"quoted only space":         {in: `" "`, want: " "},
		"quoted comma semicolon":    {in: `"a,b;c=d"`, want: "a,b;c=d"},
		"escaped quote":             {in: `"a\"b"`, want: `a"b`},
		"escaped backslash":         {in: `"a\\b"`, want: `a\b`},
		"only escapes":              {in: `"\\\""`, want: `\"`},
		"surrounding whitespace":    {in: " \t abc \t ", want: "abc"},
		"surrounding ws quoted":     {in: "\t \"abc\"  ", want: "abc"},
		"bare punctuation":          {in: "a:b/c*d=e+f", want: "a:b/c*d=e+f"},
		"bare backslash":            {in: `a\b`, want: `a\b`},
		"255 bare":                  {in: k255, want: k255},
		"255 quoted":                {in: `"` + k255 + `"`, want: k255},
		"255 quoted with escapes":   {in: `"` + strings.Repeat(`\\`, 255) + `"`, want: strings.Repeat(`\`, 255)},
		"empty":                     {in: "", wantErr: "empty key"},
		"only whitespace":           {in: " \t ", wantErr: "empty key"},
		"empty quoted":              {in: `""`, wantErr: "empty key"},
		"256 bare":                  {in: k256, wantErr: "too long: 256 characters > 255"},
		"256 quoted":                {in: `"` + k256 + `"`, wantErr: "too long: 256 characters > 255"},
		"256 quoted with escapes":   {in: `"` + strings.Repeat(`\"`, 256) + `"`, wantErr: "too long: 256 characters > 255"},
		"control char bare":         {in: "ab\x07c", wantErr: "non-printable character 0x07 at position 2"},
		"control char quoted":       {in: "\"ab\x00\"", wantErr: "non-printable character 0x00 at position 3"},
		"DEL":                       {in: "ab\x7f", wantErr: "non-printable character 0x7F at position 2"},
		"newline inside":            {in: "ab\ncd", wantErr: "non-printable character 0x0A at position 2"},
		"tab inside bare":           {in: "ab\tcd", wantErr: "non-printable character 0x09 at position 2"},
		"tab inside quoted":         {in: "\"ab\tcd\"", wantErr: "non-printable character 0x09 at position 3"},
		"non-ASCII":                 {in: "café", wantErr: "non-ASCII character U+00E9 at position 3"},
		"non-ASCII quoted":          {in: `"café"`, wantErr: "non-ASCII character U+00E9 at position 4"},
		"invalid UTF-8":             {in: "ab\xff", wantErr: "non-ASCII byte 0xFF at position 2"},
		"unterminated":              {in: `"abc`, wantErr: "unterminated string"},
		"unterminated after escape": {in: `"abc\"`, wantErr: "unterminated string"},
		"backslash at end":          {in: `"abc\`, wantErr: "unterminated string"},
		"bad escape n":              {in: `"a\nb"`, wantErr: `bad escape \n at position 2`},
		"bad escape u":              {in: `"\u0041"`, wantErr: `bad escape \u at position 1`},
		"bad escape control":        {in: "\"a\\\x01\"", wantErr: "bad escape at position 2"},
		"trailing chars":            {in: `"abc"def`, wantErr: "trailing characters at position 5"},
		"trailing quoted":           {in: `"abc" "def"`, wantErr: "trailing characters at position 5"},
		"list of strings":           {in: `"abc", "def"`, wantErr: "not a list"},
		"list of tokens":            {in: `abc, def`, wantErr: "not a list"},
		"params on string":          {in: `"abc";a=b`, wantErr: "parameters are not supported"},
		"params on token":           {in: `abc;a=b`, wantErr: "parameters are not supported"},
		"space in bare":             {in: "abc def", wantErr: "must be sent as a quoted string"},
		"quote in bare":             {in: `ab"c"`, wantErr: `unexpected '"' at position 2`},
		"single quote":              {in: `"`, wantErr: "unterminated string"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseKey(tt.in)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("ParseKey(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseKey(%q) = %q, nil; want error containing %q", tt.in, got, tt.wantErr)
			}
			if got != "" {
				t.Errorf("ParseKey(%q) returned key %q with an error", tt.in, got)
			}
			var ke *KeyError
			if !errors.As(err, &ke) || !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("ParseKey(%q) error %T %v is not a *KeyError matching ErrInvalidKey", tt.in, err, err)
			}
			if !strings.Contains(ke.Reason, tt.wantErr) {
				t.Fatalf("ParseKey(%q) reason %q; want it to contain %q", tt.in, ke.Reason, tt.wantErr)
			}
		})
	}
}

func TestQuoteKey(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ in, want string }{
		"plain":     {"abc", `"abc"`},
		"quote":     {`a"b`, `"a\"b"`},
		"backslash": {`a\b`, `"a\\b"`},
		"space":     {"a b", `"a b"`},
		"empty":     {"", `""`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := keyquote.Quote(tt.in); got != tt.want {
				t.Fatalf("keyquote.Quote(%q) = %s; want %s", tt.in, got, tt.want)
			}
			if tt.in == "" {
				return
			}
			if back, err := ParseKey(keyquote.Quote(tt.in)); err != nil || back != tt.in {
				t.Fatalf("ParseKey(keyquote.Quote(%q)) = %q, %v", tt.in, back, err)
			}
		})
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		"abc", `"abc"`, `"a\"b\\c"`, " abc ", `""`, "", `"abc`, `"a\nb"`,
		`"abc";a=b`, "a,b", "café", "\x00", strings.Repeat("x", 256),
		`"` + strings.Repeat(`\\`, 255) + `"`, "8e03978e-40d5-43e8-bc93-6894a57f9324",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := ParseKey(v)
		if err != nil {
			var ke *KeyError
			if !errors.As(err, &ke) || !errors.Is(err, ErrInvalidKey) || ke.Reason == "" {
				t.Fatalf("ParseKey(%q): error %T %v is not a *KeyError with a reason", v, err, err)
			}
			if key != "" {
				t.Fatalf("ParseKey(%q) returned %q with an error", v, key)
			}
		} else {
			checkValidKey(t, v, key)
		}

		// Any printable key round-trips through its Structured-Field form.
		quoted := keyquote.Quote(v)
		back, err := ParseKey(quoted)
		if validKey(v) {
			if err != nil || back != v {
				t.Fatalf("ParseKey(keyquote.Quote(%q)) = %q, %v", v, back, err)
			}
		} else if err == nil {
			t.Fatalf("ParseKey(keyquote.Quote(%q)) = %q, accepted an invalid key", v, back)
		}
		if err == nil {
			checkValidKey(t, quoted, back)
		}
	})
}

func checkValidKey(t *testing.T, in, key string) {
	t.Helper()
	if !validKey(key) {
		t.Fatalf("ParseKey(%q) = %q: not 1..255 printable ASCII", in, key)
	}
}

func validKey(key string) bool {
	if len(key) < 1 || len(key) > 255 {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7E {
			return false
		}
	}
	return true
}

func ExampleParseKey() {
	for _, header := range []string{
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, // Structured-Field string
		`8e03978e-40d5-43e8-bc93-6894a57f9324`,   // bare, as most clients send it
		`"a\"b"`,
		`"abc`,
		"",
	} {
		key, err := ParseKey(header)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(key)
	}
	// Output:
	// 8e03978e-40d5-43e8-bc93-6894a57f9324
	// 8e03978e-40d5-43e8-bc93-6894a57f9324
	// a"b
	// retrysafe: invalid idempotency key: unterminated string: missing closing '"'
	// retrysafe: invalid idempotency key: empty key: the value holds no characters
}

// TestParseKeyBareBytes checks every byte value at every inner position of
// a bare key: accepted exactly when it is visible ASCII other than '"', ','
// and ';'.
func TestParseKeyBareBytes(t *testing.T) {
	t.Parallel()
	const base = "abcdefghijklmnop"
	for pos := 1; pos < len(base)-1; pos++ {
		for c := range 256 {
			v := base[:pos] + string(byte(c)) + base[pos+1:]
			allowed := c >= 0x21 && c <= 0x7E && c != '"' && c != ',' && c != ';'
			key, err := ParseKey(v)
			if allowed && (err != nil || key != v) {
				t.Fatalf("ParseKey(%q) = %q, %v; want the key as sent", v, key, err)
			}
			if !allowed && err == nil {
				t.Fatalf("ParseKey(%q) = %q; want an error for byte %#x", v, key, c)
			}
		}
	}
}
