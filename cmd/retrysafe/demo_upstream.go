// The demo's payments upstream: it charges for every request it gets and
// knows nothing of idempotency keys.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// demoUpstream is the demo's payments service: it "charges a card" for
// every POST /payments it receives and counts the charges per order. It
// knows nothing about idempotency keys, so every charge it counts beyond
// one per order is a double charge that the gateway failed to prevent.
//
// It can be told to misbehave for one order: answer slowly after charging,
// or cut the connection after charging. It can also be taken down (its
// listener closed, so connecting is refused) and brought back on the same
// address.
type demoUpstream struct {
	addr string

	mu        sync.Mutex
	srv       *http.Server
	charges   map[string]int                   // order ID -> charges made
	behaviour map[string]demoBehaviour         // order ID -> how to misbehave
	waiters   map[demoEventKey][]chan struct{} // closed when the event happens
	seq       int
	busy      sync.WaitGroup // requests being handled
}

// demoBehaviour is how the upstream treats one order's requests.
type demoBehaviour struct {
	delay time.Duration // wait this long after charging, before answering
	drop  bool          // cut the connection after charging, never answer
}

// demoPayment is the upstream's answer to a charge.
type demoPayment struct {
	PaymentID string `json:"paymentId"`
	OrderID   string `json:"orderId"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Status    string `json:"status"`
}

// startDemoUpstream starts the payments service on a free loopback port.
func startDemoUpstream() (*demoUpstream, error) {
	u := &demoUpstream{
		charges:   make(map[string]int),
		behaviour: make(map[string]demoBehaviour),
		waiters:   make(map[demoEventKey][]chan struct{}),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u.addr = ln.Addr().String()
	u.serve(ln)
	return u, nil
}

func (u *demoUpstream) url() string { return "http://" + u.addr }

func (u *demoUpstream) serve(ln net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", u.charge)
	mux.HandleFunc("GET /payments/{order}", u.status)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	u.mu.Lock()
	u.srv = srv
	u.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// down closes the listener and every connection: connecting is refused
// until up is called.
func (u *demoUpstream) down() {
	u.mu.Lock()
	srv := u.srv
	u.srv = nil
	u.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// up starts listening again on the same address.
func (u *demoUpstream) up() error {
	var (
		ln  net.Listener
		err error
	)
	// The port was ours a moment ago; retry briefly in case the kernel
	// has not released it yet.
	for range 50 {
		if ln, err = net.Listen("tcp", u.addr); err == nil {
			u.serve(ln)
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("upstream: listen again on %s: %w", u.addr, err)
}

// close stops the service after the requests it is handling have finished.
func (u *demoUpstream) close() {
	u.down()
	u.busy.Wait()
}

// misbehave sets how the requests for order are handled.
func (u *demoUpstream) misbehave(order string, b demoBehaviour) {
	u.mu.Lock()
	u.behaviour[order] = b
	u.mu.Unlock()
}

// chargesFor returns the charges made for order.
func (u *demoUpstream) chargesFor(order string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.charges[order]
}

// totalCharges returns the charges made for every order.
func (u *demoUpstream) totalCharges() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, c := range u.charges {
		n += c
	}
	return n
}

// demoEvent is a moment in the handling of a charge.
type demoEvent int

const (
	demoCharged  demoEvent = iota // the card was charged
	demoAnswered                  // the answer was sent (or the connection cut)
)

type demoEventKey struct {
	order string
	event demoEvent
}

// on returns a channel closed when event next happens for order.
func (u *demoUpstream) on(order string, event demoEvent) <-chan struct{} {
	ch := make(chan struct{})
	k := demoEventKey{order, event}
	u.mu.Lock()
	u.waiters[k] = append(u.waiters[k], ch)
	u.mu.Unlock()
	return ch
}

// signal closes the channels waiting for event on order.
func (u *demoUpstream) signal(order string, event demoEvent) {
	k := demoEventKey{order, event}
	u.mu.Lock()
	chs := u.waiters[k]
	delete(u.waiters, k)
	u.mu.Unlock()
	for _, ch := range chs {
		close(ch)
	}
}

func (u *demoUpstream) charge(w http.ResponseWriter, r *http.Request) {
	u.busy.Add(1)
	defer u.busy.Done()
	var req struct {
		OrderID  string `json:"orderId"`
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.OrderID == "" || req.Amount <= 0 {
		http.Error(w, `{"error":"want {orderId, amount, currency}"}`, http.StatusBadRequest)
		return
	}

	u.mu.Lock()
	u.charges[req.OrderID]++
	u.seq++
	p := demoPayment{
		PaymentID: fmt.Sprintf("pay_%04d", u.seq),
		OrderID:   req.OrderID,
		Amount:    req.Amount,
		Currency:  req.Currency,
		Status:    "succeeded",
	}
	b := u.behaviour[req.OrderID]
	u.mu.Unlock()
	u.signal(req.OrderID, demoCharged)
	defer u.signal(req.OrderID, demoAnswered)

	// The card is charged. Whatever happens from here on, the money moved.
	if b.delay > 0 {
		time.Sleep(b.delay) // deliberately ignores the caller hanging up
	}
	if b.drop {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return
		}
		panic(http.ErrAbortHandler)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/"+p.OrderID)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(p)
}

// status answers GET /payments/{order}: how many times the order was
// charged. A client that does not know whether its payment went through
// asks here instead of paying again.
func (u *demoUpstream) status(w http.ResponseWriter, r *http.Request) {
	order := r.PathValue("order")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"orderId": order, "charges": u.chargesFor(order)})
}

// waitClosed waits for ch or ctx.
func waitClosed(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return errors.New("gave up waiting for the upstream")
	}
}
