package retrysafe

import (
	"strings"
	"testing"
)

func TestAccepts(t *testing.T) {
	t.Parallel()
	absent := []string(nil)
	tests := map[string]struct {
		values  []string // nil: no Accept-Encoding field
		coding  string
		accepts bool
	}{
		"no field: any coding":           {absent, "gzip", true},
		"no field: even br":              {absent, "br", true},
		"empty value: no coding":         {[]string{""}, "gzip", false},
		"identity only":                  {[]string{"identity"}, "gzip", false},
		"listed":                         {[]string{"gzip"}, "gzip", true},
		"listed, case-insensitive":       {[]string{"GZip;Q=0.5"}, "gzip", true},
		"x-gzip means gzip":              {[]string{"x-gzip"}, "gzip", true},
		"gzip means x-gzip":              {[]string{"gzip"}, "x-gzip", true},
		"q=0 refuses":                    {[]string{"gzip;q=0"}, "gzip", false},
		"q=0.000 refuses":                {[]string{"gzip; q=0.000"}, "gzip", false},
		"q=0.001 accepts":                {[]string{"gzip;q=0.001"}, "gzip", true},
		"star accepts":                   {[]string{"*"}, "gzip", true},
		"star q=0 refuses":               {[]string{"*;q=0, identity"}, "gzip", false},
		"listed beats star q=0":          {[]string{"gzip, *;q=0"}, "gzip", true},
		"listed q=0 beats star":          {[]string{"*, gzip;q=0"}, "gzip", false},
		"other coding only":              {[]string{"br"}, "gzip", false},
		"two fields":                     {[]string{"br", "deflate, gzip;q=0.8"}, "gzip", true},
		"any listing with q=0 refuses":   {[]string{"gzip, gzip;q=0"}, "gzip", false},
		"invalid weight is ignored":      {[]string{"gzip;q=2"}, "gzip", false},
		"invalid weight, star accepts":   {[]string{"gzip;q=abc, *"}, "gzip", true},
		"deflate listed":                 {[]string{"gzip, deflate"}, "deflate", true},
		"not a prefix match":             {[]string{"gzipx"}, "gzip", false},
		"whitespace and empty elements":  {[]string{" , gzip ;  q=1.0 ,"}, "gzip", true},
		"q=1.000 accepts":                {[]string{"gzip;q=1.000"}, "gzip", true},
		"q=1.5 is invalid and ignored":   {[]string{"gzip;q=1.5"}, "gzip", false},
		"other parameters are tolerated": {[]string{"gzip;level=1"}, "gzip", true},
	}
	for name, tc := range tests {
		if got := accepts(tc.values, tc.values != nil, tc.coding); got != tc.accepts {
			t.Errorf("%s: accepts(%q, %q) = %v, want %v", name, tc.values, tc.coding, got, tc.accepts)
		}
	}
}

func TestOfferedAcceptEncoding(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		values  []string
		want    string
		changed bool
	}{
		"gzip alone is kept":           {[]string{"gzip"}, "gzip", false},
		"browser":                      {[]string{"gzip, deflate, br, zstd"}, "gzip, deflate", true},
		"weights kept":                 {[]string{"br;q=1.0, gzip;q=0.8, deflate;q=0.5"}, "gzip;q=0.8, deflate;q=0.5", true},
		"nothing decodable":            {[]string{"br, zstd"}, "identity", true},
		"empty value":                  {[]string{""}, "identity", true},
		"star expands":                 {[]string{"*"}, "gzip, deflate", true},
		"star expands to the unlisted": {[]string{"br, gzip;q=0.5, *;q=0.1"}, "gzip;q=0.5, deflate;q=0.1", true},
		"star q=0 refuses identity":    {[]string{"br, *;q=0"}, "gzip;q=0, deflate;q=0, identity;q=0", true},
		"star q=0, identity listed":    {[]string{"*;q=0, identity"}, "gzip;q=0, deflate;q=0, identity", true},
		"x-gzip counts as gzip":        {[]string{"x-gzip, *"}, "x-gzip, deflate", true},
		"two fields joined":            {[]string{"gzip", "deflate"}, "gzip, deflate", true},
		"names lower-cased":            {[]string{"GZIP;q=0.5"}, "gzip;q=0.5", true},
	}
	for name, tc := range tests {
		got, changed := offeredAcceptEncoding(tc.values)
		if got != tc.want || changed != tc.changed {
			t.Errorf("%s: offeredAcceptEncoding(%q) = %q, %v; want %q, %v", name, tc.values, got, changed, tc.want, tc.changed)
		}
	}
}

// identityAcceptable is RFC 9110 §12.5.3 rule 2, for the property below.
func identityAcceptable(values []string) bool {
	prefs := appendAcceptEncoding(nil, values)
	listed, star := false, false
	for _, p := range prefs {
		if p.name == "identity" {
			listed = true
			if p.zero() {
				return false
			}
		}
		if p.name == "*" && p.zero() {
			star = true
		}
	}
	return listed || !star
}

// FuzzOfferedAcceptEncoding: the Accept-Encoding a handler is offered
// names only codings retrysafe can decode, and accepts each of them (and
// the identity coding) exactly when the client's does.
func FuzzOfferedAcceptEncoding(f *testing.F) {
	for _, s := range []string{"", "gzip", "gzip, deflate, br, zstd", "*;q=0, identity", "br;q=1, *;q=0.5", "x-gzip;q=0", "identity;q=0, *", ",;q=0,*;Q=0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		values := []string{s}
		offered, _ := offeredAcceptEncoding(values)
		for _, p := range appendAcceptEncoding(nil, []string{offered}) {
			if !isDecodable(p.name) {
				t.Fatalf("offered %q for %q names %q", offered, s, p.name)
			}
		}
		if strings.Contains(offered, "*") {
			t.Fatalf("offered %q for %q keeps a wildcard", offered, s)
		}
		for _, c := range []string{"gzip", "x-gzip", "deflate"} {
			if a, b := accepts(values, true, c), accepts([]string{offered}, true, c); a != b {
				t.Fatalf("%q accepts %s: %v; offered %q: %v", s, c, a, offered, b)
			}
		}
		if a, b := identityAcceptable(values), identityAcceptable([]string{offered}); a != b {
			t.Fatalf("%q accepts identity: %v; offered %q: %v", s, a, offered, b)
		}
	})
}
