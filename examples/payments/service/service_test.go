package service_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/examples/payments/provider"
	"github.com/retrysafe/retrysafe/examples/payments/service"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// forEachBackend runs test on SQLite and on PostgreSQL.
func forEachBackend(t *testing.T, test func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}

// TestPayReplayAndBusinessChecks: the happy path, a replay of the same
// operation, and the business-state checks that hold whatever the key.
func TestPayReplayAndBusinessChecks(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, provider.Config{}, nil)
		order := e.createOrder(49900, "UAH")
		key := randomHex(16)

		first := e.mustPost("/payments", key, payBody(order, 49900, "UAH"))
		if first.Status != http.StatusCreated {
			t.Fatalf("pay: %d %s", first.Status, first.Body)
		}
		var p paymentJSON
		first.decode(t, &p)
		if p.Status != "succeeded" || p.ChargeID == "" || first.Header.Get("Location") != "/payments/"+p.ID {
			t.Fatalf("pay: %+v, Location %q", p, first.Header.Get("Location"))
		}

		again := e.mustPost("/payments", key, payBody(order, 49900, "UAH"))
		if !again.Replayed || again.Status != first.Status || !bytes.Equal(again.Body, first.Body) {
			t.Fatalf("replay: %d replayed=%v %s, want the first answer %s", again.Status, again.Replayed, again.Body, first.Body)
		}

		var prob problemJSON
		paid := e.mustPost("/payments", randomHex(16), payBody(order, 49900, "UAH"))
		paid.decode(t, &prob)
		if paid.Status != http.StatusConflict || prob.Title != "order already paid" {
			t.Fatalf("paying a paid order with a new key: %d %s", paid.Status, paid.Body)
		}
		if got := e.psp.ChargeCount(); got != 1 {
			t.Fatalf("provider charges = %d, want 1", got)
		}
		var o orderJSON
		e.mustGet("/orders/"+order).decode(t, &o)
		if o.Status != "paid" || len(o.Payments) != 1 {
			t.Fatalf("order: %+v", o)
		}

		// The audit log has every transition, in order.
		audit, err := e.database().Read().Audit(context.Background(), p.ID)
		if err != nil {
			t.Fatal(err)
		}
		var steps []string
		for _, a := range audit {
			steps = append(steps, a.From+">"+a.To)
		}
		if got := strings.Join(steps, " "); got != ">pending pending>succeeded" {
			t.Fatalf("payment audit = %q", got)
		}
	})
}

// TestValidation: malformed and invalid requests get 400 and 422 problems,
// a missing key 400, and a key reused with another body 422.
func TestValidation(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, provider.Config{}, nil)
		order := e.createOrder(1000, "EUR")
		key := randomHex(16)
		tests := map[string]struct {
			path, key string
			body      any
			status    int
			typ       string
		}{
			"missing key":        {"/payments", "", payBody(order, 1000, "EUR"), 400, "missing-key"},
			"malformed JSON":     {"/payments", randomHex(8), "not an object", 400, "malformed-request"},
			"unknown field":      {"/payments", randomHex(8), map[string]any{"orderId": order, "amount": 1, "currency": "EUR", "tip": 1}, 400, "malformed-request"},
			"negative amount":    {"/payments", randomHex(8), payBody(order, -5, "EUR"), 422, "invalid-request"},
			"bad currency":       {"/orders", randomHex(8), map[string]any{"amount": 5, "currency": "euro"}, 422, "invalid-request"},
			"amount differs":     {"/payments", randomHex(8), payBody(order, 999, "EUR"), 422, "amount-mismatch"},
			"no such order":      {"/payments", randomHex(8), payBody("ord_missing", 1000, "EUR"), 404, "not-found"},
			"refund bad payment": {"/payments/pay_missing/refunds", randomHex(8), map[string]any{"amount": 1}, 404, "not-found"},
		}
		for name, tc := range tests {
			a := e.mustPost(tc.path, tc.key, tc.body)
			var prob problemJSON
			a.decode(t, &prob)
			if a.Status != tc.status || !strings.HasSuffix(prob.Type, "/"+tc.typ) || a.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s: %d %s %s, want %d %s", name, a.Status, a.Header.Get("Content-Type"), a.Body, tc.status, tc.typ)
			}
		}
		// The same key with another body: 422 from the middleware.
		if a := e.mustPost("/payments", key, payBody(order, 1000, "EUR")); a.Status != http.StatusCreated {
			t.Fatalf("pay: %d %s", a.Status, a.Body)
		}
		if a := e.mustPost("/payments", key, payBody(order, 2000, "EUR")); a.Status != http.StatusUnprocessableEntity {
			t.Fatalf("same key, other body: %d %s", a.Status, a.Body)
		}
		if got := e.psp.ChargeCount(); got != 1 {
			t.Fatalf("provider charges = %d, want 1", got)
		}
		// A request that fails validation does not spend its key: the
		// corrected request with the same key runs (and is not a 422).
		fixKey, order2 := randomHex(16), e.createOrder(500, "EUR")
		if a := e.mustPost("/payments", fixKey, payBody(order2, -1, "EUR")); a.Status != http.StatusUnprocessableEntity {
			t.Fatalf("invalid amount: %d %s", a.Status, a.Body)
		}
		if a := e.mustPost("/payments", fixKey, payBody(order2, 500, "EUR")); a.Status != http.StatusCreated || a.Replayed {
			t.Fatalf("corrected request with the same key: %d replayed=%v %s", a.Status, a.Replayed, a.Body)
		}
		if got := e.psp.ChargeCount(); got != 2 {
			t.Fatalf("provider charges = %d, want 2", got)
		}
	})
}

// TestRefunds: only a succeeded payment, at most its amount, each refund
// once per key.
func TestRefunds(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, provider.Config{DeclineAbove: 5000}, nil)
		order := e.createOrder(3000, "USD")
		var p paymentJSON
		e.mustPost("/payments", randomHex(16), payBody(order, 3000, "USD")).decode(t, &p)
		refunds := "/payments/" + p.ID + "/refunds"

		key := randomHex(16)
		first := e.mustPost(refunds, key, map[string]any{"amount": 1000})
		again := e.mustPost(refunds, key, map[string]any{"amount": 1000})
		if first.Status != http.StatusCreated || !again.Replayed || !bytes.Equal(first.Body, again.Body) {
			t.Fatalf("refund and its replay: %d %s / %d %s", first.Status, first.Body, again.Status, again.Body)
		}
		if a := e.mustPost(refunds, randomHex(16), map[string]any{"amount": 2001}); a.Status != http.StatusUnprocessableEntity {
			t.Fatalf("refund above the rest: %d %s", a.Status, a.Body)
		}
		if a := e.mustPost(refunds, randomHex(16), map[string]any{"amount": 2000}); a.Status != http.StatusCreated {
			t.Fatalf("refund of the rest: %d %s", a.Status, a.Body)
		}
		var after paymentJSON
		e.mustGet("/payments/"+p.ID).decode(t, &after)
		if after.Status != "refunded" || after.Refunded != 3000 {
			t.Fatalf("after full refund: %+v", after)
		}
		if a := e.mustPost(refunds, randomHex(16), map[string]any{"amount": 1}); a.Status != http.StatusConflict {
			t.Fatalf("refund of a refunded payment: %d %s", a.Status, a.Body)
		}

		// A declined payment fails, the order opens again, and it cannot be
		// refunded.
		big := e.createOrder(9000, "USD")
		var declined paymentJSON
		a := e.mustPost("/payments", randomHex(16), payBody(big, 9000, "USD"))
		a.decode(t, &declined)
		if a.Status != http.StatusCreated || declined.Status != "failed" {
			t.Fatalf("declined payment: %d %s", a.Status, a.Body)
		}
		if a := e.mustPost("/payments/"+declined.ID+"/refunds", randomHex(16), map[string]any{"amount": 1}); a.Status != http.StatusConflict {
			t.Fatalf("refund of a failed payment: %d %s", a.Status, a.Body)
		}
		var o orderJSON
		e.mustGet("/orders/"+big).decode(t, &o)
		if o.Status != "open" {
			t.Fatalf("order after a declined payment: %+v", o)
		}
	})
}

// TestProviderFaults: each fault of the provider, with the same key on
// every retry, charges at most once; unknown outcomes answer 202 and are
// settled by reconciliation.
func TestProviderFaults(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		fault       provider.Fault
		n           int    // how many requests in a row get the fault
		status      int    // first answer
		state       string // payment status in the first answer
		settled     string // after reconciliation
		wantCharges int
	}{
		"5xx after charge, retried":     {provider.FaultFailAfterCharge, 1, 201, "succeeded", "succeeded", 1},
		"5xx before charge, retried":    {provider.FaultFailBeforeCharge, 2, 201, "succeeded", "succeeded", 1},
		"dropped after charge, retried": {provider.FaultDropAfterCharge, 1, 201, "succeeded", "succeeded", 1},
		"dropped on every attempt":      {provider.FaultDropAfterCharge, 3, 202, "unknown", "succeeded", 1},
		"5xx after charge, always":      {provider.FaultFailAfterCharge, 3, 202, "unknown", "succeeded", 1},
		"5xx before charge, always":     {provider.FaultFailBeforeCharge, 3, 202, "unknown", "failed", 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backends[0], provider.Config{}, nil)
			order := e.createOrder(700, "UAH")
			e.psp.InjectNext(tc.fault, tc.n)
			key := randomHex(16)
			first := e.mustPost("/payments", key, payBody(order, 700, "UAH"))
			var p paymentJSON
			first.decode(t, &p)
			if first.Status != tc.status || p.Status != tc.state {
				t.Fatalf("first answer %d %s, want %d %s", first.Status, first.Body, tc.status, tc.state)
			}
			again := e.mustPost("/payments", key, payBody(order, 700, "UAH"))
			if !bytes.Equal(again.Body, first.Body) || again.Status != first.Status {
				t.Fatalf("retry got %d %s, want the first answer", again.Status, again.Body)
			}
			rep, err := e.service().Reconcile(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Mismatches) != 0 || len(rep.Errors) != 0 {
				t.Fatalf("reconciliation: %+v", rep)
			}
			if got := e.waitPayment(p.ID); got.Status != tc.settled {
				t.Fatalf("after reconciliation: %+v, want %s", got, tc.settled)
			}
			if got := e.psp.ChargeCount(); got != tc.wantCharges {
				t.Fatalf("provider charges = %d, want %d", got, tc.wantCharges)
			}
			var o orderJSON
			e.mustGet("/orders/"+order).decode(t, &o)
			if want := map[string]string{"succeeded": "paid", "failed": "open"}[tc.settled]; o.Status != want {
				t.Fatalf("order %s, want %s", o.Status, want)
			}
		})
	}
}

// TestSlowProviderAccepted: a provider slower than AcceptAfter gets a 202
// with Location; the charge finishes in the background and the status
// resource shows it. Deterministic: the provider holds its answer until the
// test releases it.
func TestSlowProviderAccepted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends[0], provider.Config{SlowDelay: time.Hour}, func(c *service.Config) {
		c.AcceptAfter = 10 * time.Millisecond
		c.ProviderTimeout = time.Hour
		c.ProviderAttemptTimeout = time.Hour
	})
	order := e.createOrder(2500, "EUR")
	e.psp.InjectNext(provider.FaultSlow, 1)
	key := randomHex(16)
	a := e.mustPost("/payments", key, payBody(order, 2500, "EUR"))
	var p paymentJSON
	a.decode(t, &p)
	if a.Status != http.StatusAccepted || p.Status != "pending" || a.Header.Get("Location") != "/payments/"+p.ID {
		t.Fatalf("slow provider: %d %s Location %q", a.Status, a.Body, a.Header.Get("Location"))
	}
	if got := e.mustGet(a.Header.Get("Location")); !strings.Contains(string(got.Body), `"status":"pending"`) {
		t.Fatalf("status resource while the provider holds: %s", got.Body)
	}
	for e.psp.Stats().Requests == 0 { // the charge request is held at the provider
		time.Sleep(5 * time.Millisecond)
	}
	e.psp.ReleaseSlow()
	if got := e.waitPayment(p.ID); got.Status != "succeeded" {
		t.Fatalf("after the provider answered: %+v", got)
	}
	if again := e.mustPost("/payments", key, payBody(order, 2500, "EUR")); again.Status != http.StatusAccepted || !bytes.Equal(again.Body, a.Body) {
		t.Fatalf("a retry gets the stored 202: %d %s", again.Status, again.Body)
	}
	if got := e.psp.ChargeCount(); got != 1 {
		t.Fatalf("provider charges = %d, want 1", got)
	}
}

// TestReconcileReportsMismatches: a charge nobody asked for, and a payment
// whose charge the provider lost, are reported.
func TestReconcileReportsMismatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends[0], provider.Config{}, nil)
	order := e.createOrder(100, "UAH")
	var p paymentJSON
	e.mustPost("/payments", randomHex(16), payBody(order, 100, "UAH")).decode(t, &p)

	// A charge made with a key no payment has.
	stray := &provider.Client{BaseURL: e.psp.URL(), HTTP: testenv.HTTPClient}
	req, _ := http.NewRequest(http.MethodPost, e.psp.URL()+"/charges", strings.NewReader(`{"amount":5,"currency":"UAH","reference":"manual"}`))
	req.Header.Set("Idempotency-Key", "stray-key")
	resp, err := testenv.HTTPClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := stray.Lookup(context.Background(), "stray-key"); err != nil {
		t.Fatal(err)
	}

	a, err := e.post(context.Background(), "/admin/reconcile?minAge=0s", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var rep service.Report
	a.decode(t, &rep)
	if a.Status != http.StatusOK || len(rep.Mismatches) != 1 || rep.Mismatches[0].Kind != service.MismatchChargeWithoutPayment {
		t.Fatalf("reconcile: %d %s", a.Status, a.Body)
	}

	// A second provider that never saw the payment: the payment has no charge.
	other := provider.New(provider.Config{})
	otherURL, err := other.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	cfg := e.cfg
	cfg.DB = e.database()
	cfg.ProviderURL = otherURL
	svc, err := service.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	rep2, err := svc.Reconcile(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep2.Mismatches) != 1 || rep2.Mismatches[0].Kind != service.MismatchPaymentWithoutCharge || rep2.Mismatches[0].PaymentID != p.ID {
		t.Fatalf("reconcile against an empty provider: %+v", rep2)
	}
}
