package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// server is an httptest server that records the Idempotency-Key and body of
// every request it sees, then lets h answer the n-th request (from 1).
type server struct {
	*httptest.Server
	mu     sync.Mutex
	keys   []string
	hasKey []bool
	bodies []string
}

func newServer(t *testing.T, h func(w http.ResponseWriter, r *http.Request, n int)) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		_, ok := r.Header[HeaderKey]
		s.keys = append(s.keys, r.Header.Get(HeaderKey))
		s.hasKey = append(s.hasKey, ok)
		s.bodies = append(s.bodies, string(body))
		n := len(s.keys)
		s.mu.Unlock()
		h(w, r, n)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) seen() (keys []string, bodies []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...), append([]string(nil), s.bodies...)
}

// transport returns a Transport sending to s that records its waits instead
// of sleeping.
func (s *server) transport(sleeps *[]time.Duration) *Transport {
	return &Transport{
		Base: s.Client().Transport,
		sleep: func(ctx context.Context, d time.Duration) error {
			*sleeps = append(*sleeps, d)
			return ctx.Err()
		},
	}
}

func hangUp(t *testing.T, w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	_ = conn.Close()
}

func status(code int) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) { w.WriteHeader(code) }
}
