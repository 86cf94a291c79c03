package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/examples/payments/provider"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// Parameters of the crash run.
const (
	crashPayments = 30  // logical payments per run
	crashWorkers  = 8   // payments in flight at once
	crashRate     = 0.2 // fraction of attempts killed at each kill point
	crashLease    = 1500 * time.Millisecond
	crashBudget   = 3 * time.Minute
)

// TestKilledBetweenChargeAndCompletion runs the built command as a child
// process against a provider in this process, and kills it (SIGKILL, by
// its own --crash-at hook) between the charge and the completion: right
// after the provider answered, and right after that answer was
// checkpointed, in a fifth of the attempts at each point, the attempts that
// resume killed ones included. Every kill also kills whatever else was in
// flight. Each payment is sent by 2–3 concurrent clients with the same key,
// which retry through the kills, the restarts, the 409s and the 503s; the
// command is restarted on the same database after each kill.
//
// Then the provider's own ledger is the oracle: exactly one charge per
// order, none without its payment. And every payment ends in one state:
// every answer to its key the same 201 with the succeeded payment and the
// provider's charge, the payment succeeded, its order paid, its record
// completed.
//
// Under the takeover policy the attempts that take over must resume from
// the checkpoints (a run without a resume fails); under the Resolver the
// provider is asked first and settles most of them.
func TestKilledBetweenChargeAndCompletion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command and kills it repeatedly")
	}
	if runtime.GOOS == "windows" {
		t.Skip("kills and restarts a child process")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "payments")
	if out, err := exec.Command("go", "build", "-race", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	type db struct {
		name string
		args func(t *testing.T) ([]string, func(ctx context.Context) (*repo.DB, error))
	}
	dbs := []db{
		{"sqlite", func(t *testing.T) ([]string, func(ctx context.Context) (*repo.DB, error)) {
			path := filepath.Join(t.TempDir(), "payments.db")
			return []string{"--db", path}, func(ctx context.Context) (*repo.DB, error) {
				return repo.OpenSQLite(ctx, path, repo.SQLiteOptions{})
			}
		}},
		{"postgres", func(t *testing.T) ([]string, func(ctx context.Context) (*repo.DB, error)) {
			url := postgresURL(t)
			schema := fmt.Sprintf("payments_crash_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if conn, err := pgx.Connect(ctx, url); err == nil {
					_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
					_ = conn.Close(ctx)
				}
			})
			return []string{"--postgres", url, "--schema", schema}, func(ctx context.Context) (*repo.DB, error) {
				return repo.OpenPostgres(ctx, url, schema)
			}
		}},
	}
	for _, d := range dbs {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			// One policy after the other: two children at a time, not four,
			// on a machine that runs the other tests too.
			for _, policy := range []string{"takeover", "resolver"} {
				t.Run(policy, func(t *testing.T) {
					args, open := d.args(t)
					runKills(t, bin, d.name, policy, args, open)
				})
			}
		})
	}
}

// paymentKey returns the idempotency key of payment i of a run. Every
// fourth is chosen so that its first two attempts are killed after the
// checkpoint, should they get there (not after the charge), and the one
// after those every fourth so that its first attempt is killed after the
// charge: each kill point is then hit in every run, whatever else the
// random kills do. The others are random.
func paymentKey(prefix string, i int) string {
	for n := 0; ; n++ {
		key := fmt.Sprintf("%s-%d-%x", prefix, i, rand.Uint64())
		switch i % 4 {
		case 0:
			if roll("after-charge", key, 1) >= crashRate && roll("after-checkpoint", key, 1) < crashRate &&
				roll("after-charge", key, 2) >= crashRate && roll("after-checkpoint", key, 2) < crashRate {
				return key
			}
		case 1:
			if roll("after-charge", key, 1) < crashRate {
				return key
			}
		default:
			return key
		}
	}
}

func postgresURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("RETRYSAFE_POSTGRES_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		testenv.Unreachable(t, "PostgreSQL at "+url+" (set RETRYSAFE_POSTGRES_URL)", err)
	}
	_ = conn.Close(ctx)
	return url
}

// killCounts is what the child processes reported and the supervisor saw.
type killCounts struct {
	restarts       atomic.Int64 // child exits the test did not ask for
	afterCharge    atomic.Int64 // "crash at after-charge" lines
	afterCheckpt   atomic.Int64 // "crash at after-checkpoint" lines
	resumes        atomic.Int64 // "resuming from checkpoint" lines
	resolvedDone   atomic.Int64 // the Resolver decided to complete a record
	resolvedRerun  atomic.Int64 // the Resolver decided to let a retry take over
	mu             sync.Mutex
	resolvedPays   map[string]bool // payments the Resolver decided to complete
	outcomeUnknown atomic.Int64    // 409 outcome-unknown answers the clients got
	inProgress     atomic.Int64    // 409 request-in-progress answers
	unavailable    atomic.Int64    // 503 answers
	cut            atomic.Int64    // requests that got no answer (killed, restarting)
}

// child supervises the command: it restarts it whenever it dies until
// stop is called.
type child struct {
	t      *testing.T
	bin    string
	args   []string
	counts *killCounts
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	killed atomic.Bool  // the current run printed its kill point
	stderr bytes.Buffer // the last lines of every run, for failures
}

// start runs the command and waits until it serves.
func (c *child) start() {
	c.t.Helper()
	cmd := exec.Command(c.bin, c.args...)
	cmd.Env = append(os.Environ(), "PAYMENTS_POSTGRES_URL=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	ready := make(chan struct{})
	exited := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			if strings.Contains(sc.Text(), "checkout page and API") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			c.count(sc.Text())
		}
	}()
	go func() {
		wg.Wait()
		_ = cmd.Wait()
		close(exited)
	}()
	c.mu.Lock()
	c.cmd, c.exited = cmd, exited
	c.killed.Store(false)
	c.mu.Unlock()
	select {
	case <-ready:
	case <-exited:
		c.t.Fatalf("the command exited before serving:\n%s", c.tail())
	case <-time.After(60 * time.Second):
		c.t.Fatalf("the command did not serve within 60s:\n%s", c.tail())
	}
}

// count tallies one line of the command's stderr.
func (c *child) count(line string) {
	switch {
	case strings.Contains(line, "crash at after-charge"):
		c.counts.afterCharge.Add(1)
		c.killed.Store(true)
	case strings.Contains(line, "crash at after-checkpoint"):
		c.counts.afterCheckpt.Add(1)
		c.killed.Store(true)
	case strings.Contains(line, "resuming from checkpoint"):
		c.counts.resumes.Add(1)
	case strings.Contains(line, "resolver decided") && strings.Contains(line, "decision=complete"):
		c.counts.resolvedDone.Add(1)
		if _, pay, ok := strings.Cut(line, " payment="); ok {
			c.counts.mu.Lock()
			c.counts.resolvedPays[strings.Fields(pay)[0]] = true
			c.counts.mu.Unlock()
		}
	case strings.Contains(line, "resolver decided") && strings.Contains(line, "decision=rerun"):
		c.counts.resolvedRerun.Add(1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stderr.WriteString(line + "\n")
	if c.stderr.Len() > 64<<10 {
		b := c.stderr.Bytes()
		c.stderr.Reset()
		c.stderr.Write(b[len(b)-32<<10:])
	}
}

func (c *child) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

// supervise restarts the command each time it dies, until ctx ends.
func (c *child) supervise(ctx context.Context) {
	for {
		c.mu.Lock()
		exited := c.exited
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-exited:
		}
		if ctx.Err() != nil {
			return
		}
		if !c.killed.Load() {
			c.t.Errorf("the command died, not at a kill point:\n%s", c.tail())
		}
		c.counts.restarts.Add(1)
		c.start()
	}
}

// stop ends the command with SIGTERM and waits for it.
func (c *child) stop() {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// crashAnswer is one final answer to a payment's key.
type crashAnswer struct {
	status int
	body   []byte
}

func runKills(t *testing.T, bin, backend, policy string, dbArgs []string, open func(ctx context.Context) (*repo.DB, error)) {
	psp := provider.New(provider.Config{})
	pspURL, err := psp.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer psp.Close()
	// The provider loses some answers after charging, on the first request
	// with a key: the service's transport retries with the same key.
	psp.SetFaultFunc(func(r provider.Request) provider.Fault {
		h := fnv.New64a()
		h.Write([]byte(r.Key))
		if r.Attempt == 1 && h.Sum64()%10 == 0 {
			return provider.FaultDropAfterCharge
		}
		return provider.FaultNone
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	args := append([]string{
		"--listen", addr, "--provider-url", pspURL, "--lease", crashLease.String(),
		"--reconcile-every", "0", "--accept-after", "1m", "--simulated-drops=false",
		"--resolver=" + fmt.Sprint(policy == "resolver"), "--on-unknown", "takeover",
		"--crash-at", fmt.Sprintf("after-charge=%g,after-checkpoint=%g", crashRate, crashRate),
	}, dbArgs...)
	counts := &killCounts{resolvedPays: map[string]bool{}}
	c := &child{t: t, bin: bin, args: args, counts: counts}
	c.start()
	superCtx, stopSupervising := context.WithCancel(context.Background())
	supervised := make(chan struct{})
	go func() { defer close(supervised); c.supervise(superCtx) }()
	defer func() {
		stopSupervising()
		<-supervised
		c.stop()
	}()

	ctx, cancel := context.WithTimeout(context.Background(), crashBudget)
	defer cancel()
	hc := &http.Client{Timeout: 20 * time.Second}
	base := "http://" + addr
	var (
		mu      sync.Mutex
		answers = map[string][]crashAnswer{} // by payment key
		orderOf = map[string]string{}        // payment key → order id
	)
	jobs := make(chan int)
	var wg sync.WaitGroup
	began := time.Now()
	for range crashWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				amount := int64(100 + i)
				st, body := sendUntilFinal(ctx, hc, base+"/orders", fmt.Sprintf("order-%s-%d", policy, i),
					map[string]any{"amount": amount, "currency": "UAH"}, counts)
				var o struct{ ID string }
				if st != http.StatusCreated || json.Unmarshal(body, &o) != nil {
					t.Errorf("POST /orders: %d %s", st, body)
					continue
				}
				key := paymentKey("pay-"+policy, i)
				mu.Lock()
				orderOf[key] = o.ID
				mu.Unlock()
				senders := 2 + i%2
				var sw sync.WaitGroup
				ready := make(chan struct{})
				for range senders {
					sw.Add(1)
					go func() {
						defer sw.Done()
						<-ready // the duplicates overlap
						st, body := sendUntilFinal(ctx, hc, base+"/payments", key,
							map[string]any{"orderId": o.ID, "amount": amount, "currency": "UAH"}, counts)
						mu.Lock()
						answers[key] = append(answers[key], crashAnswer{st, body})
						mu.Unlock()
					}()
				}
				close(ready)
				sw.Wait()
			}
		}()
	}
	for i := range crashPayments {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the run exceeded its budget of %s\n%s", crashBudget, c.tail())
	}
	ran := time.Since(began)
	stopSupervising()
	<-supervised
	c.stop()

	// The provider's ledger.
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if err := psp.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	db, err := open(wctx)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	payments, err := db.Read().AllPayments(wctx)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*repo.Payment{}
	for _, p := range payments {
		byID[p.ID] = p
	}
	chargesOfOrder := map[string][]provider.Charge{}
	doubleCharges := 0
	for _, ch := range psp.Charges() {
		if ch.Status != provider.ChargeSucceeded {
			t.Errorf("charge %s: %s", ch.ID, ch.Status)
			continue
		}
		p := byID[ch.Reference]
		if p == nil {
			doubleCharges++ // charged for a payment that does not exist
			t.Errorf("charge %s (%s) has no payment", ch.ID, ch.Reference)
			continue
		}
		chargesOfOrder[p.OrderID] = append(chargesOfOrder[p.OrderID], ch)
	}
	for order, chs := range chargesOfOrder {
		if len(chs) > 1 {
			doubleCharges += len(chs) - 1
			t.Errorf("order %s charged %d times: %+v", order, len(chs), chs)
		}
	}
	if n := psp.ChargeCount(); n != crashPayments {
		t.Errorf("the provider made %d charges, want %d (one per payment)", n, crashPayments)
	}
	if len(payments) != crashPayments {
		t.Errorf("%d payments, want %d", len(payments), crashPayments)
	}

	// Every payment in one state, seen the same way by every client, the
	// database, the record and the provider.
	var takeovers, tookOver int
	for key, order := range orderOf {
		l := answers[key]
		if len(l) == 0 {
			t.Errorf("payment %s: no answer", key)
			continue
		}
		for _, a := range l[1:] {
			if a.status != l[0].status || !bytes.Equal(a.body, l[0].body) {
				t.Errorf("payment %s: answers differ:\n%d %s\n%d %s", key, l[0].status, l[0].body, a.status, a.body)
			}
		}
		var got struct{ ID, OrderID, Status, ChargeID string }
		if l[0].status != http.StatusCreated || json.Unmarshal(l[0].body, &got) != nil || got.Status != repo.PaymentSucceeded || got.OrderID != order {
			t.Errorf("payment %s: answered %d %s, want 201 succeeded for order %s", key, l[0].status, l[0].body, order)
			continue
		}
		chs := chargesOfOrder[order]
		if len(chs) != 1 || chs[0].ID != got.ChargeID || chs[0].Reference != got.ID {
			t.Errorf("payment %s (%s, charge %s): the provider holds %+v", key, got.ID, got.ChargeID, chs)
		}
		if p := byID[got.ID]; p == nil || p.Status != repo.PaymentSucceeded || p.ChargeID != got.ChargeID {
			t.Errorf("payment %s: stored as %+v", got.ID, p)
		}
		if o, err := db.Read().Order(wctx, order); err != nil || o.Status != repo.OrderPaid {
			t.Errorf("order %s: %+v %v", order, o, err)
		}
		rec, err := db.Store().Get(wctx, &retrysafe.GetParams{Key: key, Now: time.Now()})
		if err != nil || rec.State != retrysafe.StateCompleted || !bytes.Equal(rec.Response.Body, l[0].body) {
			t.Errorf("payment %s: record %+v %v", key, rec, err)
			continue
		}
		if rec.Attempt > 1 {
			tookOver++
			takeovers += rec.Attempt - 1
		}
	}

	kills := counts.afterCharge.Load() + counts.afterCheckpt.Load()
	t.Logf("%s/%s: %d payments in %s; %d kills (%d after the charge, %d after the checkpoint), %d takeovers (of %d payments), %d resumes from a checkpoint; Resolver decisions: %d complete (%d payments), %d re-run; clients saw %d 409 outcome-unknown, %d 409 in-progress, %d 503, %d requests cut; %d double charges",
		backend, policy, crashPayments, ran.Round(time.Millisecond), kills, counts.afterCharge.Load(), counts.afterCheckpt.Load(),
		takeovers, tookOver, counts.resumes.Load(), counts.resolvedDone.Load(), len(counts.resolvedPays), counts.resolvedRerun.Load(),
		counts.outcomeUnknown.Load(), counts.inProgress.Load(), counts.unavailable.Load(), counts.cut.Load(), doubleCharges)
	// The run must have exercised what it claims to.
	if counts.afterCharge.Load() == 0 || counts.afterCheckpt.Load() == 0 {
		t.Errorf("kills after the charge %d, after the checkpoint %d: want some of each", counts.afterCharge.Load(), counts.afterCheckpt.Load())
	}
	if counts.restarts.Load() != kills {
		t.Errorf("%d restarts for %d kills", counts.restarts.Load(), kills)
	}
	switch policy {
	case "takeover":
		if takeovers == 0 || counts.resumes.Load() == 0 {
			t.Errorf("takeovers %d, resumes %d: want some", takeovers, counts.resumes.Load())
		}
	case "resolver":
		if len(counts.resolvedPays) == 0 {
			t.Error("the Resolver completed no record")
		}
	}
	if t.Failed() {
		t.Logf("the command's last stderr:\n%s", c.tail())
	}
}

// sendUntilFinal POSTs body with key until it gets an answer that is not
// 409 in-progress / outcome-unknown or 503, retrying through kills and
// restarts (no answer), as a client with a stable key would. It counts
// what it saw and returns the final status and body.
func sendUntilFinal(ctx context.Context, hc *http.Client, url, key string, body any, n *killCounts) (int, []byte) {
	b, _ := json.Marshal(body)
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := hc.Do(req)
		var got []byte
		if err == nil {
			got, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		wait := 50 * time.Millisecond
		switch {
		case err != nil:
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
				return 0, nil
			}
			n.cut.Add(1)
		case resp.StatusCode == http.StatusConflict && bytes.Contains(got, []byte("outcome-unknown")):
			n.outcomeUnknown.Add(1)
			if resp.Header.Get("Retry-After") == "" {
				return resp.StatusCode, append(got, []byte(" (no Retry-After)")...)
			}
			wait = 200 * time.Millisecond
		case resp.StatusCode == http.StatusConflict && bytes.Contains(got, []byte("request-in-progress")):
			n.inProgress.Add(1)
			wait = 100 * time.Millisecond
		case resp.StatusCode == http.StatusServiceUnavailable:
			n.unavailable.Add(1)
		default:
			return resp.StatusCode, got
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return 0, nil
}
