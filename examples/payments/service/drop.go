package service

import (
	"bytes"
	"net/http"
)

// HeaderSimulateDrop asks the service (when Config.SimulatedDrops is on) to
// process the request in full and then close the connection without an
// answer, as a flaky network would lose it.
const HeaderSimulateDrop = "X-Simulate-Drop"

// simulateDrops wraps h: a request with HeaderSimulateDrop: 1 runs to the
// end (its result is stored by the idempotency middleware), but its answer
// is thrown away and the connection closed.
func simulateDrops(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(HeaderSimulateDrop) != "1" {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&discardWriter{header: make(http.Header)}, r)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return
		}
		panic(http.ErrAbortHandler)
	})
}

// discardWriter swallows an answer.
type discardWriter struct {
	header http.Header
	body   bytes.Buffer
}

func (d *discardWriter) Header() http.Header         { return d.header }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(p []byte) (int, error) { return d.body.Write(p) }
