package service_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/examples/payments/provider"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
	"github.com/retrysafe/retrysafe/examples/payments/service"
)

// Chaos parameters: a fixed seed, a few hundred logical payments, a bounded
// run.
const (
	chaosSeed     = 20261129
	chaosPayments = 200
	chaosWorkers  = 16
	chaosBudget   = 3 * time.Minute // a liveness bound for the run, restart included (not a speed check: CI runs it beside the whole workspace); checks have their own bound
)

// chaosPlan is what the client does for one logical payment, drawn from
// the seeded generator before anything runs.
type chaosPlan struct {
	amount     int64
	orderKey   string
	payKey     string
	duplicates int     // concurrent senders of the same request (1 = no duplicate)
	loseRate   float64 // chance that an attempt's answer is lost (cancelled after sending)
	payAgain   string  // when set: then pay the same order with this new key
}

// TestChaos runs hundreds of logical payments against the service with
// random duplicates, concurrent retries, lost answers, provider faults
// (drop after charge, 5xx before and after charge, slow answers) and a
// restart of the service midway; then it reconciles and checks the
// invariants:
//
//   - provider charges = succeeded payments, one to one by key;
//   - no order paid twice;
//   - every retry of an operation got the same answer (409 "in progress"
//     and 503 "retry" answers, which store nothing, aside);
//   - every payment left unknown (or pending) was settled by
//     reconciliation, and none is left open.
func TestChaos(t *testing.T) {
	t.Parallel()
	forEachBackend(t, runChaos)
}

func runChaos(t *testing.T, b backend) {
	rng := rand.New(rand.NewPCG(chaosSeed, 1))
	plans := make([]chaosPlan, chaosPayments)
	key := func() string { return fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()) }
	for i := range plans {
		p := chaosPlan{amount: 100 + rng.Int64N(90000), orderKey: key(), payKey: key(), duplicates: 1}
		if rng.Float64() < 0.3 {
			p.duplicates = 2 + rng.IntN(2)
		}
		if rng.Float64() < 0.3 {
			p.loseRate = 0.5
		}
		if rng.Float64() < 0.15 {
			p.payAgain = key()
		}
		plans[i] = p
	}

	e := newEnv(t, b, provider.Config{SlowDelay: 300 * time.Millisecond}, func(c *service.Config) {
		c.AcceptAfter = 150 * time.Millisecond
		c.ProviderAttemptTimeout = time.Second
		c.ProviderTimeout = 3 * time.Second
		c.ProviderBackoff = 10 * time.Millisecond
		c.Lease = 2 * time.Second
	})
	// Provider faults, chosen per provider key (derived from the seeded
	// client keys) and attempt, so every run injects the same ones.
	e.psp.SetFaultFunc(func(r provider.Request) provider.Fault {
		h := fnv.New64a()
		fmt.Fprintf(h, "%d/%s", chaosSeed, r.Key)
		roll := h.Sum64() % 100
		switch {
		case roll < 55:
			return provider.FaultNone
		case roll < 63: // one dropped answer after the charge, then fine
			return pick(r.Attempt == 1, provider.FaultDropAfterCharge)
		case roll < 71:
			return pick(r.Attempt == 1, provider.FaultFailBeforeCharge)
		case roll < 79:
			return pick(r.Attempt == 1, provider.FaultFailAfterCharge)
		case roll < 87: // slow: the service answers 202 and finishes later
			return pick(r.Attempt == 1, provider.FaultSlow)
		case roll < 92: // every attempt dropped: outcome unknown, charged
			return provider.FaultDropAfterCharge
		case roll < 96: // every attempt 5xx before charging: unknown, no charge
			return provider.FaultFailBeforeCharge
		default: // every attempt 5xx after charging: unknown, charged
			return provider.FaultFailAfterCharge
		}
	})

	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), chaosBudget)
	defer cancel()
	rec := &answers{byKey: make(map[string][]*answer)}
	var started atomic.Int64
	restarted := make(chan struct{})
	go func() { // restart the service when half the payments have started
		defer close(restarted)
		for started.Load() < chaosPayments/2 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		e.restart()
	}()

	jobs := make(chan int)
	var wg sync.WaitGroup
	for range chaosWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				started.Add(1)
				runPlan(ctx, t, e, rec, &plans[i], int64(i))
			}
		}()
	}
	for i := range plans {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	<-restarted
	if ctx.Err() != nil {
		t.Fatalf("chaos run exceeded its budget of %s", chaosBudget)
	}
	ran := time.Since(began)

	// Quiesce: no charge request left at the provider; background charges
	// of the service finished (Close also cancels any still waiting).
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.psp.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	svc, db := e.service(), e.database()
	svc.Close()
	open, err := db.Read().PaymentsByStatus(ctx, time.Time{}, repo.PaymentUnknown, repo.PaymentPending)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := svc.Reconcile(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Mismatches) != 0 || len(rep.Errors) != 0 {
		t.Fatalf("reconciliation mismatches %+v, errors %v", rep.Mismatches, rep.Errors)
	}

	// Every unknown payment was settled by reconciliation.
	var openIDs, settledIDs []string
	for _, p := range open {
		openIDs = append(openIDs, p.ID)
	}
	for _, s := range rep.Settled {
		settledIDs = append(settledIDs, s.PaymentID)
	}
	slices.Sort(openIDs)
	slices.Sort(settledIDs)
	if !slices.Equal(openIDs, settledIDs) {
		t.Fatalf("open before reconciliation %v, settled %v", openIDs, settledIDs)
	}
	if len(openIDs) == 0 {
		t.Fatal("no payment was left unknown: the run did not exercise reconciliation")
	}
	if left, err := db.Read().PaymentsByStatus(ctx, time.Time{}, repo.PaymentUnknown, repo.PaymentPending); err != nil || len(left) != 0 {
		t.Fatalf("payments still open after reconciliation: %d (%v)", len(left), err)
	}

	// Provider charges = succeeded payments, one to one.
	payments, err := db.Read().AllPayments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	succeeded := map[string]*repo.Payment{} // by provider key
	perOrder := map[string]int{}
	for _, p := range payments {
		if p.Status == repo.PaymentSucceeded || p.Status == repo.PaymentRefunded {
			succeeded[p.ProviderKey] = p
			perOrder[p.OrderID]++
		}
	}
	charges := e.psp.Charges()
	var charged int
	for _, c := range charges {
		if c.Status != provider.ChargeSucceeded {
			continue
		}
		charged++
		if p := succeeded[c.Key]; p == nil || p.ChargeID != c.ID || p.Amount != c.Amount {
			t.Errorf("charge %s (%s) has no matching succeeded payment", c.ID, c.Reference)
		}
	}
	if charged != len(succeeded) || charged != e.psp.ChargeCount() {
		t.Errorf("provider charges %d (counter %d), succeeded payments %d", charged, e.psp.ChargeCount(), len(succeeded))
	}
	// No order paid twice, and every order's status agrees with its
	// payments.
	for order, n := range perOrder {
		if n > 1 {
			t.Errorf("order %s paid %d times", order, n)
		}
	}
	for i := range plans {
		checkOrder(ctx, t, db, rec, &plans[i], perOrder)
	}
	// Every retry of an operation got the same answer.
	ops, retried := rec.check(t)

	// Every transition in the audit log follows the allowed ones.
	for _, p := range payments {
		checkAudit(ctx, t, db, p)
	}
	t.Logf("%s: run %s; %d operations (%d answered more than once), %d answers, %d payments, %d charges, %d settled by reconciliation, %d lost answers, %d in-flight 409s, %d 503s",
		b.name, ran.Round(time.Millisecond), ops, retried, rec.total, len(payments), charged, len(rep.Settled), rec.lost.Load(), rec.inFlight.Load(), rec.unavailable.Load())
}

func pick(cond bool, f provider.Fault) provider.Fault {
	if cond {
		return f
	}
	return provider.FaultNone
}

// answers records every answer per idempotency key.
type answers struct {
	mu          sync.Mutex
	byKey       map[string][]*answer
	total       int
	lost        atomic.Int64
	inFlight    atomic.Int64
	unavailable atomic.Int64
}

func (a *answers) add(key string, ans *answer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.byKey[key] = append(a.byKey[key], ans)
	a.total++
}

func (a *answers) first(key string) *answer {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l := a.byKey[key]; len(l) > 0 {
		return l[0]
	}
	return nil
}

// check compares every answer of each key with the first.
func (a *answers) check(t *testing.T) (ops, retried int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, l := range a.byKey {
		ops++
		if len(l) > 1 {
			retried++
		}
		for _, ans := range l[1:] {
			if ans.Status != l[0].Status || !bytes.Equal(ans.Body, l[0].Body) {
				t.Errorf("key %s: answers differ:\n%d %s\n%d %s", key, l[0].Status, l[0].Body, ans.Status, ans.Body)
			}
		}
	}
	return ops, retried
}

// runPlan carries out one logical payment: create its order, pay it
// (duplicates in parallel, retries with the same key, some answers lost),
// and maybe try to pay the order again with a new key.
func runPlan(ctx context.Context, t *testing.T, e *env, rec *answers, p *chaosPlan, seed int64) {
	rng := rand.New(rand.NewPCG(chaosSeed, uint64(seed)+2))
	var rngMu sync.Mutex
	lose := func() time.Duration { // 0: keep the answer
		rngMu.Lock()
		defer rngMu.Unlock()
		if rng.Float64() < p.loseRate {
			return time.Duration(rng.IntN(40)) * time.Millisecond
		}
		return 0
	}
	order := sendUntilAnswered(ctx, t, e, rec, "/orders", p.orderKey, map[string]any{"amount": p.amount, "currency": "UAH"}, lose)
	if order == nil {
		return
	}
	var o orderJSON
	order.decode(t, &o)
	body := payBody(o.ID, p.amount, "UAH")
	var wg sync.WaitGroup
	ready := make(chan struct{})
	for range p.duplicates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-ready // start together: the duplicates overlap
			sendUntilAnswered(ctx, t, e, rec, "/payments", p.payKey, body, lose)
		}()
	}
	close(ready)
	wg.Wait()
	if p.payAgain != "" {
		sendUntilAnswered(ctx, t, e, rec, "/payments", p.payAgain, body, lose)
	}
}

// sendUntilAnswered sends one operation until it gets an answer that is
// not "in progress" or "retry later", retrying with the same key. An
// attempt whose loss delay is not zero is cancelled after that delay: its
// answer is lost whether or not the service ran it. It records every
// answer and returns the last.
func sendUntilAnswered(ctx context.Context, t *testing.T, e *env, rec *answers, path, key string, body any, lose func() time.Duration) *answer {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if d := lose(); d > 0 {
			actx, cancel = context.WithTimeout(ctx, d)
		}
		a, err := e.post(actx, path, key, body)
		cancel()
		switch {
		case err != nil:
			rec.lost.Add(1) // lost (cancelled), or the service was restarting
		case a.Status == http.StatusConflict && (strings.Contains(string(a.Body), "request-in-progress") || strings.Contains(string(a.Body), "outcome-unknown")):
			// In flight, or the first attempt's outcome is unknown until
			// its lease runs out: retry with the same key either way.
			rec.inFlight.Add(1)
		case a.Status == http.StatusServiceUnavailable:
			rec.unavailable.Add(1) // nothing stored: retry with the same key
		default:
			rec.add(key, a)
			return a
		}
		// Exponential backoff, as a well-behaved client would (it could
		// also honour Retry-After).
		time.Sleep(min(25*time.Millisecond<<min(attempt, 5), 200*time.Millisecond))
	}
	t.Errorf("%s with key %s: no answer before the budget ran out", path, key)
	return nil
}

// checkOrder checks one logical payment's outcome against the database.
func checkOrder(ctx context.Context, t *testing.T, db *repo.DB, rec *answers, p *chaosPlan, perOrder map[string]int) {
	first := rec.first(p.orderKey)
	if first == nil {
		return
	}
	var o orderJSON
	first.decode(t, &o)
	cur, err := db.Read().Order(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := repo.OrderOpen
	if perOrder[o.ID] == 1 {
		want = repo.OrderPaid
	}
	if cur.Status != want {
		t.Errorf("order %s is %s, want %s", o.ID, cur.Status, want)
	}
	if p.payAgain == "" {
		return
	}
	pay, again := rec.first(p.payKey), rec.first(p.payAgain)
	if pay == nil || again == nil {
		return
	}
	var pp paymentJSON
	pay.decode(t, &pp)
	if pp.Status == repo.PaymentSucceeded && (again.Status != http.StatusConflict || !strings.Contains(string(again.Body), "order already paid")) {
		t.Errorf("paying paid order %s with a new key: %d %s", o.ID, again.Status, again.Body)
	}
}

// checkAudit checks that a payment's audit trail is a chain of allowed
// transitions ending in its current status.
func checkAudit(ctx context.Context, t *testing.T, db *repo.DB, p *repo.Payment) {
	entries, err := db.Read().Audit(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	status := ""
	for _, a := range entries {
		if a.From != status {
			t.Errorf("payment %s: audit %s>%s after %q", p.ID, a.From, a.To, status)
		}
		if a.From != "" && !slices.Contains(repo.PaymentTransitions[a.From], a.To) {
			t.Errorf("payment %s: audited transition %s>%s is not allowed", p.ID, a.From, a.To)
		}
		if a.From == repo.PaymentUnknown && !strings.HasPrefix(a.Reason, "reconciliation:") {
			t.Errorf("payment %s: unknown settled by %q, not by reconciliation", p.ID, a.Reason)
		}
		status = a.To
	}
	if status != p.Status {
		t.Errorf("payment %s is %s, audit ends at %s", p.ID, p.Status, status)
	}
}
