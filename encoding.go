package retrysafe

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Content negotiation of stored responses (RFC 9110 §12.5.3).
//
// A stored response is replayed to retries whose Accept-Encoding may differ
// from the first request's (Accept-Encoding is not part of the
// fingerprint: a retry with another Accept-Encoding is the same
// operation). So that retrysafe can always serve a retry that does not
// accept the stored coding, the handler is offered only the codings that
// retrysafe decodes with the standard library (gzip, x-gzip, deflate), and
// a replay whose coding the retry does not accept is decoded to the
// identity coding.

// decodableCodings are the content codings retrysafe can decode, and so
// the only ones a handler is offered.
var decodableCodings = []string{"gzip", "x-gzip", "deflate", "identity"}

// decodedLimitFactor bounds a decoded replay at this many times
// Config.MaxResponseBody, so that a small stored body cannot expand into
// an unbounded amount of work.
const decodedLimitFactor = 16

// codingPref is one element of Accept-Encoding: a coding name (lower
// case, "*" included) and its weight as sent ("" when absent).
type codingPref struct {
	name string
	q    string
}

func (p codingPref) zero() bool {
	return p.q != "" && strings.Trim(p.q, "0.") == ""
}

// sameCoding reports whether two coding names mean the same coding:
// "x-gzip" is "gzip" (RFC 9110 §8.4.1.3).
func sameCoding(a, b string) bool {
	norm := func(s string) string {
		if s == "x-gzip" {
			return "gzip"
		}
		return s
	}
	return norm(a) == norm(b)
}

// appendAcceptEncoding appends the elements of Accept-Encoding field
// values to prefs and returns the extended slice (the callers pass a
// small array of their own, which a usual field fits in). Elements that
// are empty or carry an invalid weight are skipped.
func appendAcceptEncoding(prefs []codingPref, values []string) []codingPref {
	for _, v := range values {
		for elem := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(elem, ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" || !isToken(name) {
				continue
			}
			p, ok := codingPref{name: name}, true
			for param := range strings.SplitSeq(params, ";") {
				k, val, _ := strings.Cut(strings.TrimSpace(param), "=")
				if strings.EqualFold(strings.TrimSpace(k), "q") {
					p.q = strings.TrimSpace(val)
					ok = validQ(p.q)
				}
			}
			if ok {
				prefs = append(prefs, p)
			}
		}
	}
	return prefs
}

// validQ reports whether s is an RFC 9110 qvalue: 0[.ddd] or 1[.000].
func validQ(s string) bool {
	if s == "" || (s[0] != '0' && s[0] != '1') {
		return false
	}
	if len(s) == 1 {
		return true
	}
	if s[1] != '.' || len(s) > 5 {
		return false
	}
	for _, c := range s[2:] {
		if c < '0' || c > '9' || (s[0] == '1' && c != '0') {
			return false
		}
	}
	return true
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// accepts reports whether a request whose Accept-Encoding field values
// are values (present false: no such field) accepts a response with the
// content coding (not "identity"), under RFC 9110 §12.5.3:
//
//   - no Accept-Encoding: any coding is acceptable;
//   - the coding is listed: acceptable unless listed with q=0 (we also
//     refuse it if any of several listings has q=0);
//   - not listed but "*" is: acceptable unless "*" has q=0;
//   - otherwise (including an empty field value) not acceptable.
func accepts(values []string, present bool, coding string) bool {
	if !present {
		return true
	}
	var buf [8]codingPref
	prefs := appendAcceptEncoding(buf[:0], values)
	for _, match := range []func(string) bool{
		func(name string) bool { return sameCoding(name, coding) },
		func(name string) bool { return name == "*" },
	} {
		listed, refused := false, false
		for _, p := range prefs {
			if match(p.name) {
				listed = true
				refused = refused || p.zero()
			}
		}
		if listed {
			return !refused
		}
	}
	return false
}

// offeredAcceptEncoding returns the Accept-Encoding the handler sees for
// a request with these field values: only the decodable codings, with
// their weights; "*" stands for the decodable codings not listed. A field
// left with nothing becomes "identity". changed is false when the field
// can be passed on as it is.
func offeredAcceptEncoding(values []string) (value string, changed bool) {
	if len(values) == 1 {
		switch values[0] {
		case "gzip", "gzip, deflate", "deflate", "identity": // the common values: nothing to do
			return values[0], false
		}
	}
	var buf [8]codingPref
	prefs := appendAcceptEncoding(buf[:0], values)
	listed := func(coding string) bool {
		for _, p := range prefs {
			if sameCoding(p.name, coding) {
				return true
			}
		}
		return false
	}
	out := make([]string, 0, 8) // joined below: a usual field stays within it
	add := func(name, q string) {
		if q != "" {
			name += ";q=" + q
		}
		out = append(out, name)
	}
	for _, p := range prefs {
		switch {
		case p.name == "*":
			for _, c := range []string{"gzip", "deflate"} {
				if !listed(c) {
					add(c, p.q)
				}
			}
			if p.zero() && !listed("identity") {
				add("identity", "0")
			}
		case isDecodable(p.name):
			add(p.name, p.q)
		}
	}
	if len(out) == 0 {
		out = []string{"identity"}
	}
	value = strings.Join(out, ", ")
	return value, len(values) != 1 || values[0] != value
}

func isDecodable(coding string) bool {
	for _, c := range decodableCodings {
		if c == coding {
			return true
		}
	}
	return false
}

// negotiate narrows the Accept-Encoding of r, the handler's own copy of
// the request (see withBody), to the codings retrysafe can decode (see
// [offeredAcceptEncoding]). When it changes, r gets a header map of its
// own: the caller's request keeps its header. A request without
// Accept-Encoding is left without one.
func negotiate(r *http.Request) {
	values, present := r.Header["Accept-Encoding"]
	if !present {
		return
	}
	v, changed := offeredAcceptEncoding(values)
	if !changed {
		return
	}
	r.Header = r.Header.Clone()
	r.Header["Accept-Encoding"] = []string{v} // a canonical name: no Set
}

// contentCodings returns the content codings of a stored response in the
// order they were applied, without "identity".
func contentCodings(h http.Header) []string {
	var codings []string
	for _, v := range h["Content-Encoding"] { // as h.Values, without canonicalizing a canonical name
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	return codings
}

var errUnsupportedCoding = errors.New("retrysafe: content coding cannot be decoded")

// decoder returns a reader of body with codings (in the order they were
// applied) removed.
func decoder(codings []string, body []byte) (io.Reader, error) {
	var r io.Reader = bytes.NewReader(body)
	for i := len(codings) - 1; i >= 0; i-- {
		switch codings[i] {
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(r)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", codings[i], err)
			}
			r = zr
		case "deflate":
			// RFC 9110 "deflate" is a zlib stream; some servers send a raw
			// deflate stream instead, told apart by the zlib header.
			br := bufio.NewReader(r)
			hdr, _ := br.Peek(2)
			if len(hdr) == 2 && hdr[0]&0x0f == 8 && (uint(hdr[0])<<8|uint(hdr[1]))%31 == 0 {
				zr, err := zlib.NewReader(br)
				if err != nil {
					return nil, fmt.Errorf("deflate: %w", err)
				}
				r = zr
			} else {
				r = flate.NewReader(br)
			}
		default:
			return nil, fmt.Errorf("%w: %q", errUnsupportedCoding, codings[i])
		}
	}
	return r, nil
}

// decodedLength decodes body to the end, without keeping it, and returns
// the length of the decoded body; an error if it is corrupt, uses a coding
// retrysafe cannot decode, or would be longer than limit.
func decodedLength(codings []string, body []byte, limit int64) (int64, error) {
	r, err := decoder(codings, body)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(io.Discard, io.LimitReader(r, limit+1))
	if err != nil {
		return 0, err
	}
	if n > limit {
		return 0, fmt.Errorf("the decoded body is longer than %d bytes", limit)
	}
	return n, nil
}
