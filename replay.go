package retrysafe

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Replay of a completed record: its stored status, headers and body, with
// the replay marker, negotiated with the retry's Accept-Encoding (see
// encoding.go).

// Headers that describe the encoded bytes and are dropped from a decoded
// replay.
var encodedOnlyHeaders = []string{"Content-Encoding", "Content-Length", "Content-Digest", "Repr-Digest", "Digest", "Content-Md5"}

// replay writes a stored response with the replay marker. When the stored
// response has a content coding that r does not accept, it is decoded and
// sent with the identity coding: Content-Encoding (and digests of the
// encoded bytes) removed, Content-Length of the decoded body, Vary:
// Accept-Encoding, and a strong ETag made weak (the decoded body is the
// same content, but not the same bytes). A stored body that cannot be
// decoded is answered with a 502 replay-undecodable problem.
func (h *protectedHandler) replay(w http.ResponseWriter, r *http.Request, resp *Response) {
	codings := contentCodings(resp.Header)
	values, present := r.Header["Accept-Encoding"]
	identity := false // the retry does not accept the stored coding
	if len(resp.Body) > 0 {
		for _, c := range codings {
			identity = identity || !accepts(values, present, c)
		}
	}
	if !identity {
		writeReplay(w, resp)
		return
	}
	n, err := decodedLength(codings, resp.Body, decodedLimitFactor*h.cfg.MaxResponseBody)
	if err != nil {
		coding := strings.Join(codings, ", ")
		h.cfg.Logger.WarnContext(r.Context(), "retrysafe: stored response cannot be decoded for a retry that does not accept its coding", "coding", coding, "err", err)
		addVary(w.Header(), "Accept-Encoding")
		WriteProblem(w, h.cfg.problem(ProblemReplayUndecodable, "Stored response cannot be decoded", http.StatusBadGateway,
			fmt.Sprintf("The stored response to this Idempotency-Key is encoded with %s, which this request's Accept-Encoding does not accept, and it could not be decoded (%v). "+
				"The operation ran once and will not run again for this key. Retry with an Accept-Encoding that accepts %s to get the stored response as it is.", coding, err, coding)), 0)
		return
	}
	header := w.Header()
	copyHeader(header, resp.Header)
	for _, k := range encodedOnlyHeaders {
		header.Del(k)
	}
	addVary(header, "Accept-Encoding")
	if etag := header.Get("Etag"); strings.HasPrefix(etag, `"`) {
		header.Set("Etag", "W/"+etag)
	}
	header.Set(HeaderReplayed, "true")
	if hasLength(resp.Status) {
		header.Set("Content-Length", strconv.FormatInt(n, 10))
	}
	w.WriteHeader(resp.Status)
	dec, err := decoder(codings, resp.Body)
	if err == nil {
		_, _ = io.Copy(w, dec)
	}
}

// writeReplay writes the stored response as it is, with the replay marker
// and its Content-Length. The client's header gets copies of the stored
// values (the record is shared with every replay), in one backing array
// with the marker's and the length's.
func writeReplay(w http.ResponseWriter, resp *Response) {
	n := 0
	for _, v := range resp.Header {
		n += len(v)
	}
	values := make([]string, n+2)
	header := w.Header()
	for k, v := range resp.Header {
		c := values[:len(v):len(v)] // capped: an append never reaches the next name's values
		copy(c, v)
		values = values[len(v):]
		header[k] = c
	}
	values[0] = "true"
	header[HeaderReplayed] = values[0:1:1]
	if hasLength(resp.Status) {
		values[1] = strconv.Itoa(len(resp.Body))
		header["Content-Length"] = values[1:2:2]
	}
	w.WriteHeader(resp.Status)
	if len(resp.Body) > 0 {
		_, _ = w.Write(resp.Body)
	}
}

// addVary adds name to h's Vary unless it (or "*") is listed already.
func addVary(h http.Header, name string) {
	for _, v := range h.Values("Vary") {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f == "*" || strings.EqualFold(f, name) {
				return
			}
		}
	}
	h.Add("Vary", name)
}
