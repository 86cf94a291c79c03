package retrysafegrpc

import (
	"bytes"
	"testing"

	"github.com/retrysafe/retrysafe"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	st, _ := status.New(codes.FailedPrecondition, "declined").WithDetails(&errdetails.ErrorInfo{Reason: "CARD_DECLINED"})
	for name, r := range map[string]*result{
		"ok":    {msg: []byte{0x0a, 0x01, 'x'}, st: status.New(codes.OK, ""), header: metadata.Pairs("a", "1", "a", "2", "b-bin", "\x00\xff"), trailer: metadata.Pairs("t", "")},
		"empty": {st: status.New(codes.OK, "")},
		"error": {st: st, trailer: metadata.Pairs("t", "v")},
	} {
		resp, err := r.encode()
		if err != nil {
			t.Fatal(err)
		}
		if want := httpStatus(r.st.Code()); resp.Status != want {
			t.Errorf("%s: status %d, want %d", name, resp.Status, want)
		}
		got, err := decode(resp)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got.msg, r.msg) || !proto.Equal(got.st.Proto(), r.st.Proto()) {
			t.Errorf("%s: decoded %x %v, want %x %v", name, got.msg, got.st, r.msg, r.st)
		}
		for k, v := range r.header {
			if g := got.header[k]; len(g) != len(v) || (len(v) > 0 && g[0] != v[0]) {
				t.Errorf("%s: header %s = %q, want %q", name, k, g, v)
			}
		}
		for k, v := range r.trailer {
			if g := got.trailer[k]; len(g) != len(v) || g[0] != v[0] {
				t.Errorf("%s: trailer %s = %q, want %q", name, k, g, v)
			}
		}
	}
	if _, err := decode(&retrysafe.Response{Status: 201, Body: []byte(`{"id":1}`)}); err == nil {
		t.Error("an HTTP response decoded as a gRPC result")
	}
}

// FuzzDecode: no stored body makes decode panic, and what decodes
// encodes back to a body that decodes the same.
func FuzzDecode(f *testing.F) {
	ok, _ := (&result{msg: []byte("m"), st: status.New(codes.OK, ""), header: metadata.Pairs("k", "v")}).encode()
	bad, _ := (&result{st: status.New(codes.Internal, "x")}).encode()
	f.Add(ok.Body)
	f.Add(bad.Body)
	f.Add([]byte{0x08, 0x01, 0x22, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decode(&retrysafe.Response{Status: 200, Header: map[string][]string{"Content-Type": {ContentType}}, Body: body})
		if err != nil {
			return
		}
		again, err := r.encode()
		if err != nil {
			t.Fatal(err)
		}
		r2, err := decode(again)
		if err != nil {
			t.Fatalf("re-encoded result does not decode: %v", err)
		}
		if !bytes.Equal(r.msg, r2.msg) || !proto.Equal(r.st.Proto(), r2.st.Proto()) || len(r.header) != len(r2.header) || len(r.trailer) != len(r2.trailer) {
			t.Fatal("round trip changed the result")
		}
	})
}

// The handler's metadata is recorded, never sent by the handler's calls
// (the interceptor sends it with the answer), under grpc-go's rule that a
// header is sent once.
func TestCapturingStream(t *testing.T) {
	t.Parallel()
	s := &capturingStream{method: "/m"}
	if err := s.SetHeader(metadata.Pairs("a", "1")); err != nil {
		t.Fatal(err)
	}
	if err := s.SendHeader(metadata.Pairs("b", "2")); err != nil {
		t.Fatal(err)
	}
	if s.SetHeader(metadata.Pairs("c", "3")) == nil || s.SendHeader(nil) == nil {
		t.Fatal("a header set after SendHeader must fail, as in grpc-go")
	}
	if err := s.SetTrailer(metadata.Pairs("t", "1")); err != nil {
		t.Fatal(err)
	}
	s.header.Set(MetadataReplayed, "true") // a handler cannot forge the marker into the record
	h, tr := s.captured()
	if len(h) != 2 || h.Get("a")[0] != "1" || h.Get("b")[0] != "2" || len(tr) != 1 || s.Method() != "/m" {
		t.Fatalf("captured %v %v", h, tr)
	}
}
