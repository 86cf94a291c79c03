package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

const demoDescription = `
Plays the failure stories of idempotent payments against a real gateway, on
this machine, with nothing to install: a small payments service that
charges a card for every request it receives (and knows nothing about
idempotency keys), and the retrysafe gateway in front of it, with its
records in an SQLite file in a temporary directory. Both listen on
127.0.0.1 on free ports.

Stories: a double click; a response lost on the way back; 50 concurrent
duplicates; the same key with another amount; a retry after the payments
service was down; a retry after the client gave up; a request without a
key; the payments service cutting its connection after charging.

The demo prints what every client saw and how many charges the payments
service made, and checks the invariant: charges made = logical payments.
It exits with status 1 if any expectation fails.`

const demoExamples = `  go run ./cmd/retrysafe demo
  retrysafe demo --verbose     # also print every request and the gateway's log lines
  retrysafe demo --keep        # keep the SQLite file, then inspect its records:
  retrysafe keys list --store sqlite:/tmp/retrysafe-demo-NNNN/retrysafe.db`

// Demo timings. The upstream timeout must be shorter than the lease; the
// slow answers must fit in the wait timeout.
const (
	demoLease           = 3 * time.Second
	demoUpstreamTimeout = 2 * time.Second
	demoWaitTimeout     = 1500 * time.Millisecond
	demoSlow            = 600 * time.Millisecond // a slow charge
	demoCredential      = "Bearer demo-shop-key"
)

// runDemo is the "demo" command.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", "[--keep] [--verbose]", demoDescription, demoExamples, stdout, stderr)
	keep := fs.Bool("keep", false, "keep the temporary directory with the SQLite file")
	verbose := fs.Bool("verbose", false, "print every request and the gateway's log lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}

	dir, err := os.MkdirTemp("", "retrysafe-demo-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	d, err := startDemo(ctx, dir, *verbose, stdout)
	if err != nil {
		return err
	}
	defer d.close()
	if *keep {
		defer fmt.Fprintf(stdout, "\nKept %s. Inspect the records with:\n  retrysafe keys list --store sqlite:%s\n", dir, d.dbPath)
	}
	return d.run(ctx)
}

// demo holds the running upstream and gateway.
type demo struct {
	out     io.Writer
	verbose bool
	dbPath  string

	upstream *demoUpstream
	store    *sqlite.Store
	srv      *http.Server
	gwURL    string
	client   *http.Client

	mu    sync.Mutex
	seq   int
	wants map[string]int // order ID -> charges a correct system makes
}

func startDemo(ctx context.Context, dir string, verbose bool, out io.Writer) (_ *demo, err error) {
	d := &demo{out: out, verbose: verbose, dbPath: filepath.Join(dir, "retrysafe.db"), wants: make(map[string]int)}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if d.upstream, err = startDemoUpstream(); err != nil {
		return nil, fmt.Errorf("start the payments service: %w", err)
	}
	if d.store, err = sqlite.Open(ctx, d.dbPath, sqlite.Config{}); err != nil {
		return nil, fmt.Errorf("open the store: %w", err)
	}
	upstreamURL, _ := url.Parse(d.upstream.url())
	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	gw, err := gateway.New(gateway.Config{
		Upstream: upstreamURL,
		Store:    d.store,
		Defaults: gateway.Policy{
			RequireKey:  true,
			TTL:         time.Hour,
			Lease:       demoLease,
			InFlight:    retrysafe.InFlightWait,
			WaitTimeout: demoWaitTimeout,
		},
		UpstreamTimeout: demoUpstreamTimeout,
		Logger:          logger,
	})
	if err != nil {
		return nil, fmt.Errorf("configure the gateway: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d.gwURL = "http://" + ln.Addr().String()
	d.srv = &http.Server{Handler: gw, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = d.srv.Serve(ln) }()
	d.client = &http.Client{Transport: &http.Transport{
		MaxIdleConns:        100,
		MaxIdleConnsPerHost: 100,
		IdleConnTimeout:     30 * time.Second,
	}}
	return d, nil
}

func (d *demo) close() {
	if d.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = d.srv.Shutdown(ctx)
		cancel()
	}
	if d.upstream != nil {
		d.upstream.close()
	}
	if d.store != nil {
		_ = d.store.Close()
	}
	if d.client != nil {
		d.client.CloseIdleConnections()
	}
}

// demoStory is one failure story: play runs it and returns what the
// clients saw; it records failed expectations in the row.
type demoStory struct {
	title string
	about string
	play  func(ctx context.Context, d *demo, row *demoRow)
}

// demoRow is one line of the final table.
type demoRow struct {
	title    string
	saw      []string // what each client saw, in order
	order    string   // the logical payment's order ID
	charges  int
	want     int
	failures []string
	took     time.Duration
}

func (r *demoRow) expect(ok bool, format string, args ...any) {
	if !ok {
		r.failures = append(r.failures, fmt.Sprintf(format, args...))
	}
}

var demoStories = []demoStory{
	{"double click", "the customer clicks Pay twice; both requests carry the same key", demoDoubleClick},
	{"response lost", "the payment went through but the answer never reached the client; it retries", demoResponseLost},
	{"50 concurrent duplicates", "a retry storm: 50 requests with one key arrive at the same moment", demoBurst},
	{"same key, other amount", "a buggy client reuses a key for a different payment", demoOtherAmount},
	{"payments service down", "the gateway cannot reach the payments service; the client retries later", demoUpstreamDown},
	{"client gave up", "the client hangs up while the payment runs and retries a moment later", demoClientGaveUp},
	{"missing key", "a client forgets the Idempotency-Key header", demoMissingKey},
	{"connection cut after charging", "the payments service charges, then its connection breaks", demoUpstreamCut},
}

func (d *demo) run(ctx context.Context) error {
	fmt.Fprintf(d.out, "retrysafe demo: a payments service behind the retrysafe gateway\n")
	fmt.Fprintf(d.out, "  payments service  %s  (charges a card per request; knows nothing about keys)\n", d.upstream.url())
	fmt.Fprintf(d.out, "  gateway           %s  (store sqlite:%s)\n", d.gwURL, d.dbPath)
	fmt.Fprintf(d.out, "  gateway policy    key required; a duplicate waits up to %s for the original, then gets 409; lease %s\n\n",
		demoWaitTimeout, demoLease)

	rows := make([]*demoRow, 0, len(demoStories))
	for i, s := range demoStories {
		fmt.Fprintf(d.out, "[%d/%d] %s: %s\n", i+1, len(demoStories), s.title, s.about)
		row := &demoRow{title: s.title}
		start := time.Now()
		s.play(ctx, d, row)
		row.took = time.Since(start)
		if row.order != "" {
			row.charges = d.upstream.chargesFor(row.order)
			row.expect(row.charges == row.want, "the payments service charged %d times, want %d", row.charges, row.want)
		}
		status := "ok"
		if len(row.failures) > 0 {
			status = "FAILED"
		}
		fmt.Fprintf(d.out, "      %s -> %d charge(s)  %s  (%.2fs)\n", strings.Join(row.saw, ", "), row.charges, status, row.took.Seconds())
		for _, f := range row.failures {
			fmt.Fprintf(d.out, "      ! %s\n", f)
		}
		rows = append(rows, row)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return d.summary(rows)
}

func (d *demo) summary(rows []*demoRow) error {
	fmt.Fprintln(d.out)
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tstory\twhat the clients saw\tcharges\twant\tresult")
	failed := 0
	for i, r := range rows {
		status := "ok"
		if len(r.failures) > 0 {
			status = "FAILED"
			failed++
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\n", i+1, r.title, strings.Join(r.saw, ", "), r.charges, r.want, status)
	}
	_ = tw.Flush()

	d.mu.Lock()
	logical := 0
	for _, n := range d.wants {
		logical += n
	}
	d.mu.Unlock()
	charges := d.upstream.totalCharges()
	fmt.Fprintln(d.out, "(charges: what the payments service charged for the story's order; want: what a correct system charges)")
	fmt.Fprintln(d.out)
	if charges == logical && failed == 0 {
		fmt.Fprintf(d.out, "invariant holds: charges made (%d) = logical payments (%d)\n", charges, logical)
		return nil
	}
	fmt.Fprintf(d.out, "invariant BROKEN: charges made (%d), logical payments (%d), stories failed: %d\n", charges, logical, failed)
	return fmt.Errorf("%d of %d stories failed; charges made %d, logical payments %d", failed, len(rows), charges, logical)
}

// newPayment starts a logical payment: a fresh order ID and idempotency
// key. want is how many charges a correct system makes for it (1, or 0 if
// it is rejected).
func (d *demo) newPayment(row *demoRow, want int) (order, key string) {
	d.mu.Lock()
	d.seq++
	n := d.seq
	d.mu.Unlock()
	order = fmt.Sprintf("order-%03d", 100+n)
	key = fmt.Sprintf("%08x-demo-4000-8000-%012d", time.Now().UnixNano()&0xffffffff, n)
	d.mu.Lock()
	d.wants[order] = want
	d.mu.Unlock()
	row.order, row.want = order, want
	return order, key
}

// demoAnswer is what one client saw.
type demoAnswer struct {
	status    int
	replayed  bool
	paymentID string
	problem   string // last segment of a problem type URI
	err       error  // no answer at all
	conflicts int    // 409 answers waited out before this one
	retryIn   time.Duration
}

func (a demoAnswer) String() string {
	switch {
	case a.err != nil && errors.Is(a.err, context.Canceled):
		return "hung up"
	case a.err != nil:
		return "error"
	}
	s := fmt.Sprint(a.status)
	if a.conflicts > 0 {
		s = strings.Repeat("409→", a.conflicts) + s
	}
	if a.replayed {
		s += " replayed"
	}
	if a.problem != "" {
		s += " " + strings.ReplaceAll(strings.TrimPrefix(a.problem, "upstream-"), "-", " ")
	}
	return s
}

// pay sends POST /payments through the gateway and reports what the client
// saw. key "" sends no key.
func (d *demo) pay(ctx context.Context, key, order string, amount int64) demoAnswer {
	body, _ := json.Marshal(map[string]any{"orderId": order, "amount": amount, "currency": "UAH"})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.gwURL+"/payments", bytes.NewReader(body))
	if err != nil {
		return demoAnswer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", demoCredential)
	if key != "" {
		req.Header.Set(retrysafe.HeaderKey, key)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		d.logf("POST /payments key=%s order=%s: %v", key, order, err)
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return demoAnswer{err: err}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	a := demoAnswer{status: resp.StatusCode, replayed: resp.Header.Get(retrysafe.HeaderReplayed) == "true"}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		a.retryIn = time.Duration(secs) * time.Second
	}
	var p struct {
		PaymentID string `json:"paymentId"`
		Type      string `json:"type"`
	}
	_ = json.Unmarshal(data, &p)
	a.paymentID = p.PaymentID
	if p.Type != "" {
		a.problem = p.Type[strings.LastIndex(p.Type, "/")+1:]
	}
	d.logf("POST /payments key=%s order=%s amount=%d -> %d replayed=%v %s", key, order, amount, a.status, a.replayed, bytes.TrimSpace(data))
	return a
}

// payUntil sends a payment and hangs up as soon as cut is closed (or
// after demoUpstreamTimeout at the latest): the client's connection is
// cut while the gateway and the payments service are still working.
func (d *demo) payUntil(ctx context.Context, key, order string, cut <-chan struct{}) demoAnswer {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-cut:
		case <-time.After(demoUpstreamTimeout):
		case <-cctx.Done():
		}
		cancel()
	}()
	return d.pay(cctx, key, order, 49900)
}

// payPatiently is pay by a well-behaved client: on 409 (the original
// request is still in progress) it waits as long as Retry-After says and
// sends the same request again, a few times at most.
func (d *demo) payPatiently(ctx context.Context, key, order string, amount int64) demoAnswer {
	conflicts := 0
	for {
		a := d.pay(ctx, key, order, amount)
		if a.status != http.StatusConflict || conflicts == 4 {
			a.conflicts = conflicts
			return a
		}
		conflicts++
		wait := min(max(a.retryIn, 100*time.Millisecond), 2*time.Second)
		select {
		case <-ctx.Done():
			return demoAnswer{err: ctx.Err(), conflicts: conflicts}
		case <-time.After(wait):
		}
	}
}

func (d *demo) logf(format string, args ...any) {
	if d.verbose {
		fmt.Fprintf(d.out, "      . "+format+"\n", args...)
	}
}

// A double click: two requests with one key, the second 20ms after the
// first, while the first is still being charged. The second waits for the
// first and gets its answer.
func demoDoubleClick(ctx context.Context, d *demo, row *demoRow) {
	order, key := d.newPayment(row, 1)
	d.upstream.misbehave(order, demoBehaviour{delay: 200 * time.Millisecond})
	answers := make([]demoAnswer, 2)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = d.payPatiently(ctx, key, order, 49900) })
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	for _, a := range answers {
		row.saw = append(row.saw, a.String())
	}
	row.expect(answers[0].status == http.StatusCreated && answers[1].status == http.StatusCreated, "want 201 for both clicks")
	row.expect(answers[0].replayed != answers[1].replayed, "want exactly one answer replayed")
	row.expect(answers[0].paymentID != "" && answers[0].paymentID == answers[1].paymentID, "want one payment ID for both clicks, got %q and %q", answers[0].paymentID, answers[1].paymentID)
}

// A response lost on the way back: the payments service charges, then
// takes a while to answer; the client's connection is cut right after the
// charge, so it never sees the answer. It retries with the same key at
// once: the retry waits for the original to finish and gets its stored
// answer.
func demoResponseLost(ctx context.Context, d *demo, row *demoRow) {
	order, key := d.newPayment(row, 1)
	d.upstream.misbehave(order, demoBehaviour{delay: demoSlow})
	first := d.payUntil(ctx, key, order, d.upstream.on(order, demoCharged))
	retry := d.payPatiently(ctx, key, order, 49900)
	saw := first.String()
	if first.err != nil {
		saw = "connection lost"
	}
	row.saw = append(row.saw, saw, "retry: "+retry.String())
	row.expect(first.err != nil, "want the first request to lose its connection, got %s", first)
	row.expect(retry.status == http.StatusCreated && retry.replayed, "want the retry to get 201 replayed, got %s", retry)
}

// A burst of 50 concurrent duplicates, released at one instant.
func demoBurst(ctx context.Context, d *demo, row *demoRow) {
	const n = 50
	order, key := d.newPayment(row, 1)
	d.upstream.misbehave(order, demoBehaviour{delay: 100 * time.Millisecond})
	answers := make([]demoAnswer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			<-start
			answers[i] = d.payPatiently(ctx, key, order, 49900)
		})
	}
	close(start)
	wg.Wait()
	counts := map[string]int{}
	var seen []string
	ids := map[string]bool{}
	fresh, created, waited := 0, 0, 0
	for _, a := range answers {
		if a.conflicts > 0 {
			waited++
		}
		a.conflicts = 0 // summarised below
		s := a.String()
		if counts[s] == 0 {
			seen = append(seen, s)
		}
		counts[s]++
		if a.paymentID != "" {
			ids[a.paymentID] = true
		}
		if a.status == http.StatusCreated {
			created++
			if !a.replayed {
				fresh++
			}
		}
	}
	slices.Sort(seen)
	for _, s := range seen {
		row.saw = append(row.saw, fmt.Sprintf("%d× %s", counts[s], s))
	}
	if waited > 0 {
		row.saw = append(row.saw, fmt.Sprintf("(%d got 409 first and retried)", waited))
	}
	row.expect(created == n, "want 201 for all %d clients, got %d", n, created)
	row.expect(fresh == 1, "want exactly one fresh answer (the rest replayed), got %d", fresh)
	row.expect(len(ids) == 1, "want one payment ID in every answer, got %d", len(ids))
}

// The same key sent again with another amount: rejected with 422, and the
// first payment stands.
func demoOtherAmount(ctx context.Context, d *demo, row *demoRow) {
	order, key := d.newPayment(row, 1)
	first := d.pay(ctx, key, order, 49900)
	other := d.pay(ctx, key, order, 99900)
	row.saw = append(row.saw, first.String(), "other amount: "+other.String())
	row.expect(first.status == http.StatusCreated && !first.replayed, "want 201 for the first payment, got %s", first)
	row.expect(other.status == http.StatusUnprocessableEntity, "want 422 for the other amount, got %s", other)
}

// The payments service is down: the gateway cannot connect, so nothing ran;
// it answers 502 and releases the key. Once the service is back, the retry
// with the same key runs, and charges once.
func demoUpstreamDown(ctx context.Context, d *demo, row *demoRow) {
	order, key := d.newPayment(row, 1)
	d.upstream.down()
	// Let the gateway's connection pool see its idle connections to the
	// service close, as it would long before a real outage is noticed.
	time.Sleep(100 * time.Millisecond)
	first := d.pay(ctx, key, order, 49900)
	charged := d.upstream.chargesFor(order)
	if err := d.upstream.up(); err != nil {
		row.expect(false, "%v", err)
		return
	}
	retry := d.pay(ctx, key, order, 49900)
	again := d.pay(ctx, key, order, 49900)
	row.saw = append(row.saw, "down: "+first.String(), "back: "+retry.String(), again.String())
	row.expect(first.status == http.StatusBadGateway && first.problem == gateway.ProblemUpstreamUnreachable,
		"want 502 %s while the service is down, got %s", gateway.ProblemUpstreamUnreachable, first)
	row.expect(charged == 0, "want no charge while the service is down, got %d", charged)
	row.expect(retry.status == http.StatusCreated && !retry.replayed, "want the retry to run (201, not replayed), got %s", retry)
	row.expect(again.status == http.StatusCreated && again.replayed, "want the next retry replayed, got %s", again)
}

// The client hangs up while the payment runs. The gateway finishes the
// call and stores the answer; the client's retry, after the payment went
// through, gets it at once.
func demoClientGaveUp(ctx context.Context, d *demo, row *demoRow) {
	order, key := d.newPayment(row, 1)
	d.upstream.misbehave(order, demoBehaviour{delay: 300 * time.Millisecond})
	answered := d.upstream.on(order, demoAnswered)
	first := d.payUntil(ctx, key, order, d.upstream.on(order, demoCharged))
	if err := waitClosed(ctx, answered); err != nil {
		row.expect(false, "%v", err)
		return
	}
	time.Sleep(50 * time.Millisecond) // let the gateway store the answer
	retry := d.payPatiently(ctx, key, order, 49900)
	row.saw = append(row.saw, first.String(), "later: "+retry.String())
	row.expect(first.err != nil, "want the client to hang up before the answer, got %s", first)
	row.expect(retry.status == http.StatusCreated && retry.replayed, "want the stored answer (201 replayed), got %s", retry)
}

// No key on an endpoint that requires one: 400, nothing runs.
func demoMissingKey(ctx context.Context, d *demo, row *demoRow) {
	order, _ := d.newPayment(row, 0)
	a := d.pay(ctx, "", order, 49900)
	row.saw = append(row.saw, a.String())
	row.expect(a.status == http.StatusBadRequest && a.problem == retrysafe.ProblemMissingKey, "want 400 %s, got %s", retrysafe.ProblemMissingKey, a)
}

// The payments service charges, then its connection breaks before it
// answers. The gateway cannot know whether the charge happened, so it
// keeps the key locked (until its lease ends) instead of letting a retry
// charge again: the retry gets 409. The client then asks the service for
// the order's status, as it should after any unknown outcome, and finds
// the payment.
func demoUpstreamCut(ctx context.Context, d *demo, row *demoRow) {
	order, key := d.newPayment(row, 1)
	d.upstream.misbehave(order, demoBehaviour{drop: true})
	first := d.pay(ctx, key, order, 49900)
	retry := d.pay(ctx, key, order, 49900)
	charges := -1
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.gwURL+"/payments/"+order, nil)
	req.Header.Set("Authorization", demoCredential)
	if resp, err := d.client.Do(req); err == nil {
		var st struct {
			Charges int `json:"charges"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		charges = st.Charges
	}
	row.saw = append(row.saw, first.String(), "retry: "+retry.String(), fmt.Sprintf("GET status: %d charge", charges))
	row.expect(first.status == http.StatusBadGateway && first.problem == gateway.ProblemOutcomeUnknown,
		"want 502 %s, got %s", gateway.ProblemOutcomeUnknown, first)
	row.expect(retry.status == http.StatusConflict, "want 409 while the key is locked, got %s", retry)
	row.expect(charges == 1, "want the status check to show 1 charge, got %d", charges)
}

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
