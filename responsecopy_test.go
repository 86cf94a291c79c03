package retrysafe_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// TestStoredBodiesSurviveBufferReuse: bodies of every size stored
// through the memory store come back intact after many later requests.
func TestStoredBodiesSurviveBufferReuse(t *testing.T) {
	t.Parallel()
	store := memory.New(memory.Config{})
	t.Cleanup(func() { _ = store.Close() })
	checkBodiesSurvive(t, store, nil)
}

// keepingStore embeds the memory store but keeps the responses it is
// given, then stores them later as they are then.
type keepingStore struct {
	*memory.Store
	kept []*retrysafe.CompleteParams
}

func (s *keepingStore) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	c := *p
	s.kept = append(s.kept, &c)
	return nil
}

// flush completes the kept records with their responses as they are now.
func (s *keepingStore) flush(t *testing.T) {
	for _, p := range s.kept {
		if err := s.Store.Complete(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	s.kept = nil
}

// TestEmbeddingStoreKeepsResponses: the middleware never reuses a response
// it handed to Complete, so even a store that keeps it without a copy (the
// contract asks for one) stores what was answered.
func TestEmbeddingStoreKeepsResponses(t *testing.T) {
	t.Parallel()
	inner := memory.New(memory.Config{})
	t.Cleanup(func() { _ = inner.Close() })
	store := &keepingStore{Store: inner}
	checkBodiesSurvive(t, store, func() { store.flush(t) }) // a reused buffer would show now
}

// checkBodiesSurvive stores responses of several sizes through the
// middleware, runs between (if not nil), and checks that every replay
// returns its body intact.
func checkBodiesSurvive(t *testing.T, store retrysafe.Store, between func()) {
	t.Helper()
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(echoHandler())
	bodies := sampleBodies()
	for n, b := range bodies {
		postEcho(t, h, keyOf(n), b, http.StatusCreated)
	}
	if between != nil {
		between()
	}
	for n, b := range bodies {
		if got := postEcho(t, h, keyOf(n), b, http.StatusCreated); got != string(b) {
			t.Errorf("replay %d: body %.40q, want %.40q", n, got, b)
		}
	}
}

// echoHandler answers 201 with the request's body.
func echoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(buf.Bytes())
	})
}

// sampleBodies are bodies of many sizes, each of its own bytes.
func sampleBodies() [][]byte {
	var out [][]byte
	for n, size := range []int{0, 1, 20, 100, 200, 300, 400, 5000, 3, 250} {
		out = append(out, []byte(strings.Repeat(string(rune('a'+n)), size)))
	}
	return out
}

func keyOf(n int) string { return "reuse-key-" + string(rune('a'+n)) }

// postEcho posts body with key to h and returns the answer's body.
func postEcho(t *testing.T, h http.Handler, key string, body []byte, want int) string {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/echo", bytes.NewReader(body))
	r.Header.Set(retrysafe.HeaderKey, key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != want {
		t.Fatalf("key %s: status %d, want %d", key, w.Code, want)
	}
	return w.Body.String()
}
