package retrysafe_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/retrysafe/retrysafe"
)

// rawClient sends exactly the Accept-Encoding a test sets (none when it
// sets none) and never decodes the answer.
var rawClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// sendAE posts body with key and Accept-Encoding ae ("-": no field).
func sendAE(t *testing.T, url, key, ae string) result {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":5}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	if ae != "-" {
		req.Header["Accept-Encoding"] = []string{ae}
	}
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return result{resp.StatusCode, resp.Header, b}
}

func gzipped(t testing.TB, p []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(p)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// plainBody is what the encoding handler encodes.
var plainBody = []byte(strings.Repeat(`{"charge":"ch_1","amount":5}`, 100))

// encodingHandler answers plainBody with the coding its "coding" query
// names, if the request's Accept-Encoding mentions it, else identity (a
// simple server, as many are). It sets a strong ETag and no Vary, and
// records the Accept-Encoding it was offered.
type encodingHandler struct {
	t       testing.TB
	mu      sync.Mutex
	offered []string
}

func (h *encodingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ae := r.Header.Get("Accept-Encoding")
	h.mu.Lock()
	h.offered = append(h.offered, ae)
	h.mu.Unlock()
	coding := r.URL.Query().Get("coding")
	body := plainBody
	wanted := strings.TrimPrefix(coding, "raw-")
	if coding == "corrupt" {
		wanted = "gzip"
	}
	if strings.Contains(ae, wanted) {
		var buf bytes.Buffer
		switch coding {
		case "gzip":
			body = gzipped(h.t, plainBody)
		case "deflate":
			zw := zlib.NewWriter(&buf)
			zw.Write(plainBody)
			zw.Close()
			body = buf.Bytes()
		case "raw-deflate":
			coding = "deflate"
			fw, _ := flate.NewWriter(&buf, flate.BestSpeed)
			fw.Write(plainBody)
			fw.Close()
			body = buf.Bytes()
		case "corrupt":
			coding, body = "gzip", []byte("this is not gzip")
		}
		w.Header().Set("Content-Encoding", coding)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("ETag", `"v1"`)
	w.Header().Set("Content-Digest", "sha-256=:AAAA:")
	w.WriteHeader(http.StatusCreated)
	w.Write(body)
}

func (h *encodingHandler) lastOffered() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.offered[len(h.offered)-1]
}

// checkIdentityReplay: r is the stored response decoded to identity.
func checkIdentityReplay(t *testing.T, what string, r result) {
	t.Helper()
	if r.status != http.StatusCreated || r.header.Get(retrysafe.HeaderReplayed) != "true" {
		t.Fatalf("%s: %d replayed=%q, want a 201 replay", what, r.status, r.header.Get(retrysafe.HeaderReplayed))
	}
	if ce := r.header.Get("Content-Encoding"); ce != "" {
		t.Errorf("%s: Content-Encoding %q, want none", what, ce)
	}
	if !bytes.Equal(r.body, plainBody) {
		t.Errorf("%s: body %q, want the decoded body", what, r.body)
	}
	if cl := r.header.Get("Content-Length"); cl != strconv.Itoa(len(plainBody)) {
		t.Errorf("%s: Content-Length %q, want %d", what, cl, len(plainBody))
	}
	if v := r.header.Values("Vary"); !containsFold(v, "Accept-Encoding") {
		t.Errorf("%s: Vary %q, want Accept-Encoding", what, v)
	}
	if etag := r.header.Get("ETag"); etag != `W/"v1"` {
		t.Errorf("%s: ETag %q, want the weak W/\"v1\"", what, etag)
	}
	if d := r.header.Get("Content-Digest"); d != "" {
		t.Errorf("%s: Content-Digest %q of the encoded bytes kept", what, d)
	}
	if r.header.Get("Content-Type") != "application/json" {
		t.Errorf("%s: other headers lost: %v", what, r.header)
	}
}

func containsFold(values []string, name string) bool {
	for _, v := range values {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), name) {
				return true
			}
		}
	}
	return false
}

// TestReplayNegotiatesContentCoding: a response stored with a content
// coding is replayed as stored to a retry that accepts the coding, and
// decoded to identity for one that does not (RFC 9110 §12.5.3). The
// handler is offered only codings retrysafe can decode.
func TestReplayNegotiatesContentCoding(t *testing.T) {
	t.Parallel()
	h := &encodingHandler{t: t}
	srv := newServer(t, retrysafe.Config{}, h)
	url := srv.URL + "/pay?coding=gzip"
	stored := gzipped(t, plainBody)

	first := sendAE(t, url, "k", "br, gzip;q=0.9, zstd")
	if got := h.lastOffered(); got != "gzip;q=0.9" {
		t.Errorf("handler was offered Accept-Encoding %q, want gzip;q=0.9 (br and zstd dropped)", got)
	}
	if first.status != http.StatusCreated || first.header.Get("Content-Encoding") != "gzip" || !bytes.Equal(first.body, stored) {
		t.Fatalf("first: %d %q, want the handler's gzip answer", first.status, first.header.Get("Content-Encoding"))
	}

	for _, ae := range []string{"identity", "gzip;q=0", "*;q=0, identity", "br", "", "deflate"} {
		checkIdentityReplay(t, "Accept-Encoding "+strconv.Quote(ae), sendAE(t, url, "k", ae))
	}
	for _, ae := range []string{"-", "gzip", "*", "x-gzip", "GZIP;q=0.5, identity"} {
		r := sendAE(t, url, "k", ae)
		if r.status != http.StatusCreated || r.header.Get("Content-Encoding") != "gzip" || !bytes.Equal(r.body, stored) ||
			r.header.Get("ETag") != `"v1"` || r.header.Get(retrysafe.HeaderReplayed) != "true" {
			t.Errorf("Accept-Encoding %q: %d %q ETag %q, want the stored gzip bytes as they are",
				ae, r.status, r.header.Get("Content-Encoding"), r.header.Get("ETag"))
		}
	}
	if len(h.offered) != 1 {
		t.Errorf("handler ran %d times, want 1: Accept-Encoding is not part of the fingerprint", len(h.offered))
	}
}

// TestReplayDecodesDeflate: both forms of "deflate" seen in the wild (zlib
// as RFC 9110 says, and raw deflate) are decoded.
func TestReplayDecodesDeflate(t *testing.T) {
	t.Parallel()
	h := &encodingHandler{t: t}
	srv := newServer(t, retrysafe.Config{}, h)
	for _, coding := range []string{"deflate", "raw-deflate"} {
		url := srv.URL + "/pay?coding=" + coding
		if r := sendAE(t, url, coding, "deflate"); r.header.Get("Content-Encoding") != "deflate" {
			t.Fatalf("%s: first answer has Content-Encoding %q", coding, r.header.Get("Content-Encoding"))
		}
		checkIdentityReplay(t, coding, sendAE(t, url, coding, "identity"))
	}
}

// TestReplayOfUndecodableBody: a stored body that does not decode is not
// sent with a coding the retry refused; the retry gets a 502 problem that
// says how to get the stored bytes, and a retry that accepts the coding
// still gets them.
func TestReplayOfUndecodableBody(t *testing.T) {
	t.Parallel()
	h := &encodingHandler{t: t}
	srv := newServer(t, retrysafe.Config{}, h)
	url := srv.URL + "/pay?coding=corrupt"
	if r := sendAE(t, url, "k", "gzip"); r.header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("first answer has Content-Encoding %q", r.header.Get("Content-Encoding"))
	}
	r := sendAE(t, url, "k", "identity")
	wantProblem(t, r, http.StatusBadGateway, retrysafe.ProblemReplayUndecodable)
	if !containsFold(r.header.Values("Vary"), "Accept-Encoding") {
		t.Errorf("problem without Vary: Accept-Encoding: %v", r.header)
	}
	if r := sendAE(t, url, "k", "gzip"); r.status != http.StatusCreated || string(r.body) != "this is not gzip" {
		t.Errorf("retry accepting gzip: %d %q, want the stored bytes", r.status, r.body)
	}
	if len(h.offered) != 1 {
		t.Errorf("handler ran %d times, want 1", len(h.offered))
	}
}

// TestReplayDecodingIsBounded: a small stored body that decodes to far
// more than 16 × MaxResponseBody is not decoded for a retry; the retry
// gets the replay-undecodable problem.
func TestReplayDecodingIsBounded(t *testing.T) {
	t.Parallel()
	bomb := gzipped(t, make([]byte, 1<<20)) // about 1 KiB
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusCreated)
		w.Write(bomb)
	})
	srv := newServer(t, retrysafe.Config{MaxResponseBody: 4096}, h)
	if r := sendAE(t, srv.URL, "k", "gzip"); r.status != http.StatusCreated || !bytes.Equal(r.body, bomb) {
		t.Fatalf("first: %d, %d bytes", r.status, len(r.body))
	}
	r := sendAE(t, srv.URL, "k", "identity")
	wantProblem(t, r, http.StatusBadGateway, retrysafe.ProblemReplayUndecodable)
	if !strings.Contains(string(r.body), "longer than 65536 bytes") {
		t.Errorf("detail does not give the limit: %s", r.body)
	}
}

// TestNegotiationLeavesTheCallersRequest: the handler is offered the
// narrowed Accept-Encoding on its own copy of the request, and the request
// the middleware was given keeps the header it had (an outer middleware
// may read it after).
func TestNegotiationLeavesTheCallersRequest(t *testing.T) {
	t.Parallel()
	var offered []string
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: newMemory(t)})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		offered = r.Header["Accept-Encoding"]
		w.WriteHeader(http.StatusCreated)
	}))
	req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{"amount":5}`))
	req.Header.Set("Idempotency-Key", "k")
	req.Header["Accept-Encoding"] = []string{"br, gzip, zstd"}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		t.Fatalf("status %d", rec.Code)
	}
	if len(offered) != 1 || offered[0] != "gzip" {
		t.Errorf("handler was offered Accept-Encoding %q, want [gzip]", offered)
	}
	if got := req.Header["Accept-Encoding"]; len(got) != 1 || got[0] != "br, gzip, zstd" {
		t.Errorf("the caller's request has Accept-Encoding %q after the middleware, want it unchanged", got)
	}
}
