package provider_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/examples/payments/provider"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

func start(t *testing.T) *provider.Server {
	t.Helper()
	s := provider.New(provider.Config{DeclineAbove: 1000})
	if _, err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func charge(t *testing.T, s *provider.Server, key, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.URL()+"/charges", strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := testenv.HTTPClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestIdempotency: the same key charges once, however many concurrent
// requests carry it; another body with the key is refused.
func TestIdempotency(t *testing.T) {
	t.Parallel()
	s := start(t)
	const body = `{"amount":500,"currency":"UAH","reference":"pay_1"}`
	var wg sync.WaitGroup
	start := make(chan struct{})
	statuses := make(chan int, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			statuses <- charge(t, s, "k1", body).StatusCode
		}()
	}
	close(start)
	wg.Wait()
	close(statuses)
	created := 0
	for st := range statuses {
		switch st {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Errorf("status %d", st)
		}
	}
	if created != 1 || s.ChargeCount() != 1 {
		t.Fatalf("created %d, charges %d, want 1 and 1", created, s.ChargeCount())
	}
	if st := charge(t, s, "k1", `{"amount":600,"currency":"UAH","reference":"pay_1"}`).StatusCode; st != http.StatusUnprocessableEntity {
		t.Fatalf("same key, other body: %d", st)
	}
	if st := charge(t, s, "", body).StatusCode; st != http.StatusBadRequest {
		t.Fatalf("no key: %d", st)
	}
	if st := charge(t, s, "k2", `{"amount":5000,"currency":"UAH","reference":"pay_2"}`).StatusCode; st != http.StatusPaymentRequired {
		t.Fatalf("above the limit: %d", st)
	}
	c := &provider.Client{BaseURL: s.URL(), HTTP: testenv.HTTPClient}
	if ch, err := c.Lookup(context.Background(), "k2"); err != nil || ch.Status != provider.ChargeDeclined {
		t.Fatalf("lookup k2: %+v %v", ch, err)
	}
	if _, err := c.Lookup(context.Background(), "nope"); !errors.Is(err, provider.ErrNoCharge) {
		t.Fatalf("lookup of an unknown key: %v", err)
	}
	if all, err := c.List(context.Background()); err != nil || len(all) != 2 {
		t.Fatalf("list: %d %v", len(all), err)
	}
}

// TestFaults: each fault does what it says to the charge and the answer.
func TestFaults(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		fault   provider.Fault
		status  int // 0: no answer
		charged int
	}{
		"drop after charge":  {provider.FaultDropAfterCharge, 0, 1},
		"fail before charge": {provider.FaultFailBeforeCharge, 503, 0},
		"fail after charge":  {provider.FaultFailAfterCharge, 503, 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := start(t)
			s.InjectNext(tc.fault, 1)
			req, _ := http.NewRequest(http.MethodPost, s.URL()+"/charges", strings.NewReader(`{"amount":5,"currency":"EUR","reference":"r"}`))
			req.Header.Set("Idempotency-Key", "k")
			resp, err := testenv.HTTPClient.Do(req)
			status := 0
			if err == nil {
				status = resp.StatusCode
				resp.Body.Close()
			}
			if status != tc.status || s.ChargeCount() != tc.charged {
				t.Fatalf("status %d (err %v), charges %d; want %d, %d", status, err, s.ChargeCount(), tc.status, tc.charged)
			}
			// The next request with the key is answered normally, charging
			// only if nothing was charged before.
			if got := charge(t, s, "k", `{"amount":5,"currency":"EUR","reference":"r"}`).StatusCode; got != map[int]int{0: 201, 1: 200}[tc.charged] {
				t.Fatalf("retry: %d", got)
			}
			if s.ChargeCount() != 1 {
				t.Fatalf("charges after the retry: %d", s.ChargeCount())
			}
		})
	}
}

// TestWaitIdleWhileChargesArrive: WaitIdle may be called while charges
// arrive whose callers gave up: the server starts handling one after its
// caller stopped waiting, with nothing ordering that start before WaitIdle
// (the race detector reported the WaitGroup it was built on: an Add from
// zero concurrent with a Wait).
func TestWaitIdleWhileChargesArrive(t *testing.T) {
	t.Parallel()
	s := start(t)
	s.SetSlowDelay(200 * time.Millisecond)
	s.InjectNext(provider.FaultSlow, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/charges", strings.NewReader(`{"amount":1,"currency":"eur"}`))
	req.Header.Set("Idempotency-Key", "gave-up")
	if resp, err := testenv.HTTPClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("the slow charge answered within 20ms")
	}
	// The charge is being handled (or about to be): WaitIdle waits for it.
	waitCtx, waitCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer waitCancel()
	if err := s.WaitIdle(waitCtx); err != nil {
		t.Fatal(err)
	}
}

// TestLookupWhileChargeInFlight: a lookup tells "no charge" only when no
// request with the key is being handled. While one is (here: its body is
// still arriving), the lookup answers 409, which the client reports as an
// error, not ErrNoCharge; once it charged, the lookup finds the charge.
func TestLookupWhileChargeInFlight(t *testing.T) {
	t.Parallel()
	s := start(t)
	c := &provider.Client{BaseURL: s.URL(), HTTP: testenv.HTTPClient}
	ctx := context.Background()
	if _, err := c.Lookup(ctx, "k-slow"); !errors.Is(err, provider.ErrNoCharge) {
		t.Fatalf("lookup before any request: %v, want ErrNoCharge", err)
	}
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, s.URL()+"/charges", pr)
	req.Header.Set("Idempotency-Key", "k-slow")
	done := make(chan int, 1)
	go func() {
		resp, err := testenv.HTTPClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	if _, err := pw.Write([]byte(`{"amount":500,`)); err != nil { // the handler is reading the body now
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for {
		_, err = c.Lookup(ctx, "k-slow")
		if !errors.Is(err, provider.ErrNoCharge) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond) // until the handler has the key
	}
	if err == nil || errors.Is(err, provider.ErrNoCharge) || !strings.Contains(err.Error(), "409") {
		t.Fatalf("lookup while the charge request is in flight: %v, want a 409 error", err)
	}
	if _, err := pw.Write([]byte(`"currency":"UAH","reference":"pay_9"}`)); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if st := <-done; st != http.StatusCreated {
		t.Fatalf("charge: %d, want 201", st)
	}
	ch, err := c.Lookup(ctx, "k-slow")
	if err != nil || ch.Status != provider.ChargeSucceeded || ch.Reference != "pay_9" {
		t.Fatalf("lookup after the charge: %+v %v", ch, err)
	}
}
