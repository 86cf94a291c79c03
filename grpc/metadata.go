package retrysafegrpc

import (
	"context"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
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
// (grpc.SetHeader, grpc.SendHeader, grpc.SetTrailer) while passing them on
// to the call's own stream, so that a replay can send the same.
type capturingStream struct {
	grpc.ServerTransportStream
	ctx context.Context // the call's own context: done when the client has gone

	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
}

// keep reports whether metadata whose forwarding returned err belongs to
// the result: it was sent (or will be), or the client has gone and the
// operation goes on for its retry.
func (s *capturingStream) keep(err error) bool { return err == nil || s.ctx.Err() != nil }

func (s *capturingStream) SetHeader(md metadata.MD) error {
	err := s.ServerTransportStream.SetHeader(md)
	if s.keep(err) {
		s.mu.Lock()
		s.header = metadata.Join(s.header, md)
		s.mu.Unlock()
	}
	return err
}

func (s *capturingStream) SendHeader(md metadata.MD) error {
	err := s.ServerTransportStream.SendHeader(md)
	if s.keep(err) {
		s.mu.Lock()
		s.header = metadata.Join(s.header, md)
		s.mu.Unlock()
	}
	return err
}

func (s *capturingStream) SetTrailer(md metadata.MD) error {
	err := s.ServerTransportStream.SetTrailer(md)
	if s.keep(err) {
		s.mu.Lock()
		s.trailer = metadata.Join(s.trailer, md)
		s.mu.Unlock()
	}
	return err
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
