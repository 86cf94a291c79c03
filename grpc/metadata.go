package retrysafegrpc

import (
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Metadata keys used by the interceptors.
const (
	// MetadataKey carries the idempotency key, validated like the HTTP
	// Idempotency-Key header ([retrysafe.ParseKey]).
	MetadataKey = "idempotency-key"
	// MetadataReplayed is set to "true" in the header metadata of a
	// replayed answer.
	MetadataReplayed = "idempotent-replayed"
)

// capturingStream records the header and trailer metadata a handler sets
// (grpc.SetHeader, grpc.SendHeader, grpc.SetTrailer) for the result, and
// sends nothing itself: the interceptor sends the recorded metadata with
// the answer, on the first call as on replays. So the handler never sees
// the call's own transport fail (its client may have gone, and the
// operation goes on for the retry), and every caller gets the same
// metadata. It keeps grpc-go's rule that headers are sent once.
type capturingStream struct {
	method string

	mu      sync.Mutex
	sent    bool // SendHeader was called
	header  metadata.MD
	trailer metadata.MD
}

// errHeaderSent is grpc-go's answer to a header set after it was sent.
var errHeaderSent = status.Error(codes.Internal, "transport: SendHeader called multiple times")

func (s *capturingStream) Method() string { return s.method }

func (s *capturingStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sent {
		return errHeaderSent
	}
	s.header = metadata.Join(s.header, md)
	return nil
}

func (s *capturingStream) SendHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sent {
		return errHeaderSent
	}
	s.header, s.sent = metadata.Join(s.header, md), true
	return nil
}

func (s *capturingStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// captured returns copies of the metadata recorded so far, without the
// replay marker.
func (s *capturingStream) captured() (header, trailer metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()
	header, trailer = s.header.Copy(), s.trailer.Copy()
	delete(header, MetadataReplayed)
	return header, trailer
}

// sortedKeys returns md's keys in order.
func sortedKeys(md metadata.MD) []string {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
