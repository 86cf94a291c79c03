package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Charge statuses.
const (
	ChargeSucceeded = "succeeded"
	ChargeDeclined  = "declined"
)

// DefaultDeclineAbove is the default Config.DeclineAbove: amounts above
// 1,000,000 minor units are declined.
const DefaultDeclineAbove = 1_000_000

// DefaultSlowDelay is the default Config.SlowDelay.
const DefaultSlowDelay = 2 * time.Second

// Charge is one charge the provider made (or declined), identified by the
// caller's Idempotency-Key.
type Charge struct {
	ID        string    `json:"id"`
	Key       string    `json:"key"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	Reference string    `json:"reference"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"createdAt"`
}

// ChargeRequest is the body of POST /charges.
type ChargeRequest struct {
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Reference string `json:"reference"`
}

// Config configures a [Server]; zero values mean the defaults.
type Config struct {
	// DeclineAbove: amounts above it are declined (402). Zero means
	// DefaultDeclineAbove.
	DeclineAbove int64
	// SlowDelay is how long FaultSlow holds an answer. Zero means
	// DefaultSlowDelay.
	SlowDelay time.Duration
}

// Server is the mock provider. Create it with [New]; serve it with
// [Server.Start] (its own listener) or mount [Server.Handler].
type Server struct {
	closing chan struct{}
	once    sync.Once
	release chan struct{} // closed by ReleaseSlow: held slow answers go out
	// active counts the charge requests being handled. Not a
	// sync.WaitGroup: WaitIdle runs while requests keep arriving, and a
	// WaitGroup's Add from zero must not be concurrent with its Wait.
	active atomic.Int64

	mu        sync.Mutex
	cfg       Config
	byKey     map[string]*Charge
	keys      []string // in charge order
	attempts  map[string]int
	inFlight  map[string]int // charge requests being handled, by key
	requests  int
	charged   int // succeeded charges
	queue     []Fault
	faultFunc func(Request) Fault

	srv *http.Server
	url string
}

// New returns a provider with no charges.
func New(cfg Config) *Server {
	if cfg.DeclineAbove == 0 {
		cfg.DeclineAbove = DefaultDeclineAbove
	}
	if cfg.SlowDelay == 0 {
		cfg.SlowDelay = DefaultSlowDelay
	}
	return &Server{
		closing:  make(chan struct{}),
		release:  make(chan struct{}),
		cfg:      cfg,
		byKey:    make(map[string]*Charge),
		attempts: make(map[string]int),
		inFlight: make(map[string]int),
	}
}

// Handler returns the provider's HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", s.createCharge)
	mux.HandleFunc("GET /charges", s.listCharges)
	mux.HandleFunc("POST /admin/faults", s.postFaults)
	mux.HandleFunc("DELETE /admin/faults", func(w http.ResponseWriter, r *http.Request) {
		s.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /admin/stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Stats())
	})
	return mux
}

// Start serves the provider on its own listener at addr ("127.0.0.1:0"
// picks a port) and returns its base URL.
func (s *Server) Start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("provider: listen: %w", err)
	}
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.url = "http://" + ln.Addr().String()
	go func() { _ = s.srv.Serve(ln) }()
	return s.url, nil
}

// ReleaseSlow lets every slow answer held so far go out now, whatever is
// left of its delay: tests hold the provider (a long SlowDelay) to make the
// service answer 202 deterministically, then release it.
func (s *Server) ReleaseSlow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.release)
	s.release = make(chan struct{})
}

// URL returns the base URL given by Start.
func (s *Server) URL() string { return s.url }

// Close stops the server started by Start; slow answers are cut short.
func (s *Server) Close() error {
	s.once.Do(func() { close(s.closing) })
	if s.srv == nil {
		return nil
	}
	return s.srv.Close()
}

// WaitIdle waits until no charge request is being handled (for example a
// slow answer whose caller gave up), or ctx ends. It looks every 5 ms.
func (s *Server) WaitIdle(ctx context.Context) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for s.active.Load() != 0 {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Stats counts charge requests and succeeded charges.
type Stats struct {
	Charges  int `json:"charges"`
	Requests int `json:"requests"`
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Charges: s.charged, Requests: s.requests}
}

// ChargeCount returns the number of succeeded charges.
func (s *Server) ChargeCount() int { return s.Stats().Charges }

// Charges returns every charge (succeeded and declined), oldest first.
func (s *Server) Charges() []Charge {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Charge, 0, len(s.keys))
	for _, k := range s.keys {
		out = append(out, *s.byKey[k])
	}
	return out
}

func (s *Server) createCharge(w http.ResponseWriter, r *http.Request) {
	s.active.Add(1)
	defer s.active.Add(-1)
	key := strings.Trim(strings.TrimSpace(r.Header.Get("Idempotency-Key")), `"`)
	if key == "" {
		writeError(w, http.StatusBadRequest, "Idempotency-Key required")
		return
	}
	// From here until the answer, a lookup of key that finds no charge
	// says "being handled", not "none": this request may still make one.
	s.mu.Lock()
	s.inFlight[key]++
	s.mu.Unlock()
	defer s.doneWith(key)
	var req ChargeRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON: "+err.Error())
		return
	}
	if req.Amount <= 0 || len(req.Currency) != 3 {
		writeError(w, http.StatusUnprocessableEntity, "amount must be positive and currency a 3-letter code")
		return
	}

	s.mu.Lock()
	s.requests++
	s.attempts[key]++
	fault := s.nextFault(Request{Key: key, Attempt: s.attempts[key]})
	if fault == FaultFailBeforeCharge {
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "injected fault: failed before charging")
		return
	}
	ch, replayed := s.byKey[key]
	if replayed && (ch.Amount != req.Amount || ch.Currency != req.Currency || ch.Reference != req.Reference) {
		s.mu.Unlock()
		writeError(w, http.StatusUnprocessableEntity, "Idempotency-Key reused with a different request")
		return
	}
	if !replayed {
		ch = &Charge{ID: newChargeID(), Key: key, Amount: req.Amount, Currency: req.Currency,
			Reference: req.Reference, Status: ChargeSucceeded, CreatedAt: time.Now().UTC()}
		if req.Amount > s.cfg.DeclineAbove {
			ch.Status = ChargeDeclined
		} else {
			s.charged++
		}
		s.byKey[key] = ch
		s.keys = append(s.keys, key)
	}
	answer := *ch
	slow, release := s.cfg.SlowDelay, s.release
	s.mu.Unlock()

	switch fault {
	case FaultFailAfterCharge:
		writeError(w, http.StatusServiceUnavailable, "injected fault: failed after charging")
		return
	case FaultDropAfterCharge:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return
		}
		panic(http.ErrAbortHandler) // cannot hijack (HTTP/2): abort the stream instead
	case FaultSlow:
		t := time.NewTimer(slow)
		select {
		case <-t.C:
		case <-release:
			t.Stop()
		case <-s.closing:
			t.Stop()
		}
	}
	status := http.StatusCreated
	if replayed {
		status = http.StatusOK
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if answer.Status == ChargeDeclined {
		status = http.StatusPaymentRequired
	}
	writeJSON(w, status, answer)
}

// doneWith ends the handling of a charge request with key.
func (s *Server) doneWith(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight[key]--; s.inFlight[key] <= 0 {
		delete(s.inFlight, key)
	}
}

// listCharges answers GET /charges, and GET /charges?key=K honestly: the
// charge made with K (200), none (404), or 409 while a charge request with
// K is being handled and holds no charge yet (it may make one: ask again).
func (s *Server) listCharges(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("key") {
		key := r.URL.Query().Get("key")
		s.mu.Lock()
		ch, ok := s.byKey[key]
		var c Charge
		if ok {
			c = *ch
		}
		busy := s.inFlight[key] > 0
		s.mu.Unlock()
		switch {
		case !ok && busy:
			writeError(w, http.StatusConflict, "a charge request with this key is being handled; ask again")
			return
		case !ok:
			writeError(w, http.StatusNotFound, "no charge with this key")
			return
		}
		writeJSON(w, http.StatusOK, c)
		return
	}
	charges := s.Charges()
	sort.SliceStable(charges, func(i, j int) bool { return charges[i].CreatedAt.Before(charges[j].CreatedAt) })
	writeJSON(w, http.StatusOK, map[string]any{"charges": charges})
}

func (s *Server) postFaults(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Fault   string `json:"fault"`
		Count   int    `json:"count"`
		DelayMs int    `json:"delayMs"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON: "+err.Error())
		return
	}
	f, err := parseFault(req.Fault)
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	if req.Count <= 0 {
		req.Count = 1
	}
	if req.DelayMs > 0 {
		s.SetSlowDelay(time.Duration(req.DelayMs) * time.Millisecond)
	}
	s.InjectNext(f, req.Count)
	w.WriteHeader(http.StatusNoContent)
}

func newChargeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "ch_" + hex.EncodeToString(b[:])
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail,
	})
}

// ErrNoCharge is returned by lookups when the provider holds no charge for a
// key.
var ErrNoCharge = errors.New("provider: no charge with this key")
