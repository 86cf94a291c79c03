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

const demoExamples = `  retrysafe demo
  retrysafe demo --verbose     # also print every request and the gateway's log lines
  retrysafe demo --keep        # keep the SQLite file, then inspect its records:
  retrysafe keys list --store sqlite:/tmp/retrysafe-demo-NNNN/retrysafe.db
  retrysafe demo --dir /data   # no /tmp (a FROM-scratch container): work in /data`

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
	fs := newFlagSet("demo", "[--keep] [--verbose] [--dir DIR]", demoDescription, demoExamples, stdout, stderr)
	keep := fs.Bool("keep", false, "keep the temporary directory with the SQLite file")
	parent := fs.String("dir", "", "`directory` in which the demo makes its temporary directory (default: $TMPDIR, or /tmp)")
	verbose := fs.Bool("verbose", false, "print every request and the gateway's log lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}

	dir, err := makeTempDir(*parent, "retrysafe-demo-")
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
	{"50 concurrent duplicates", "50 requests with one key arrive at the same moment (a retry storm)", demoBurst},
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
	fmt.Fprintf(d.out, "  gateway policy    key required; a duplicate waits up to %s for the original, then gets 409\n", demoWaitTimeout)
	fmt.Fprintf(d.out, "  lease             %s: when the gateway cannot know whether a payment ran (story 8),\n", demoLease)
	fmt.Fprintf(d.out, "                    its key stays locked this long, so no retry charges it twice\n\n")

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

// makeTempDir makes a new directory named pattern+random in parent, or in
// the system's temporary directory when parent is empty. When that
// directory is missing (a FROM-scratch container has no /tmp), the error
// says how to choose another: set TMPDIR or pass --dir.
func makeTempDir(parent, pattern string) (string, error) {
	flagGiven := parent != ""
	if !flagGiven {
		parent = os.TempDir()
	}
	dir, err := os.MkdirTemp(parent, pattern)
	if err == nil {
		return dir, nil
	}
	if flagGiven {
		return "", fmt.Errorf("--dir %s: cannot make a directory in it: %w", parent, err)
	}
	if _, statErr := os.Stat(parent); errors.Is(statErr, os.ErrNotExist) {
		return "", fmt.Errorf("the temporary directory %s does not exist (a minimal container may have none): set TMPDIR to a writable directory, or pass --dir DIR", parent)
	}
	return "", fmt.Errorf("cannot make a directory in the temporary directory %s: %w; set TMPDIR to a writable directory, or pass --dir DIR", parent, err)
}
