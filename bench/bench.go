// Package bench is the load harness of the retrysafe gateway. It measures,
// over real loopback sockets and in one process, the throughput and
// latency of a plain httputil.ReverseProxy in front of a trivial upstream,
// and of the gateway in front of the same upstream, on new keys and on
// replays, for each store.
//
// Run it with
//
//	go test -run '^$' -bench . -benchtime 4000x ./bench/
//
// The benchmark prints a table of ratios gateway/plain at the end; see
// docs/performance.md for the method and the numbers of a run.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/cputime"
)

// Body is the request body every scenario sends: a small payment.
var Body = []byte(`{"orderId":"order-123","amount":49900,"currency":"UAH","meta":{"channel":"web"}}`)

// Credential is the Authorization header every request carries; the
// gateway hashes it into the records' scope.
const Credential = "Bearer bench-client"

// Upstream is a trivial payments service: it reads the request and answers
// 201 with a small JSON body. It counts the requests it received.
type Upstream struct {
	*httptest.Server
	calls atomic.Int64
}

// StartUpstream starts an Upstream on a loopback port.
func StartUpstream() *Upstream {
	u := &Upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n := u.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"paymentId":"pay_%d","status":"succeeded"}`, n)
	}))
	return u
}

// Calls returns the number of requests the upstream received.
func (u *Upstream) Calls() int64 { return u.calls.Load() }

// Transport returns the transport a proxy uses to reach the upstream: the
// same connection pool settings for the plain proxy and the gateway (the
// gateway's own defaults), so the comparison measures retrysafe alone.
func Transport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
	}
}

// StartPlainProxy starts a plain httputil.ReverseProxy in front of
// upstream: the baseline.
func StartPlainProxy(upstream string) *httptest.Server {
	target, err := url.Parse(upstream)
	if err != nil {
		panic(err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport: Transport(),
	}
	return httptest.NewServer(proxy)
}

// StartGateway starts the retrysafe gateway in front of upstream, with its
// records in store and its log discarded.
func StartGateway(upstream string, store retrysafe.Store) (*httptest.Server, error) {
	target, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	gw, err := gateway.New(gateway.Config{
		Upstream:  target,
		Store:     store,
		Defaults:  gateway.DefaultPolicy(),
		Transport: Transport(),
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	return httptest.NewServer(gw), nil
}

// Keys returns request keys: fresh ones (a new key per request) or a fixed
// set of n keys cycled through (replays, once each key has been used).
type Keys func(i int) string

var keySeq atomic.Int64

// FreshKeys returns a new, never used key on every call, whatever i.
func FreshKeys() Keys {
	run := keySeq.Add(1)
	prefix := fmt.Sprintf("bench-%d-%d-", time.Now().UnixNano(), run)
	var n atomic.Int64
	return func(int) string { return prefix + strconv.FormatInt(n.Add(1), 10) }
}

// FixedKeys cycles through n keys.
func FixedKeys(n int) Keys {
	run := keySeq.Add(1)
	prefix := fmt.Sprintf("bench-fixed-%d-%d-", time.Now().UnixNano(), run)
	return func(i int) string { return prefix + strconv.Itoa(i%n) }
}

// Result is the outcome of one load run.
type Result struct {
	Requests int
	// Errors counts transport errors and answers other than 201.
	Errors int
	// Replayed counts answers with Idempotent-Replayed: true.
	Replayed int
	Elapsed  time.Duration
	P50, P99 time.Duration
	// CPU is the CPU time (user + system) the whole process used during
	// the run: load generator, proxy or gateway, store client and upstream
	// together. Less sensitive than Elapsed to other programs on a shared
	// machine, though it does not count time spent waiting for a disk or
	// a database server.
	CPU time.Duration

	latencies []time.Duration // sorted
}

// Merge returns the result of r and o taken together (as if run one after
// the other).
func (r Result) Merge(o Result) Result {
	m := Result{
		Requests:  r.Requests + o.Requests,
		Errors:    r.Errors + o.Errors,
		Replayed:  r.Replayed + o.Replayed,
		Elapsed:   r.Elapsed + o.Elapsed,
		CPU:       r.CPU + o.CPU,
		latencies: append(slices.Clone(r.latencies), o.latencies...),
	}
	slices.Sort(m.latencies)
	m.P50, m.P99 = percentile(m.latencies, 0.50), percentile(m.latencies, 0.99)
	return m
}

// RPS is the throughput in requests per second.
func (r Result) RPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// CPUPerRequest is the process CPU time per request.
func (r Result) CPUPerRequest() time.Duration {
	if r.Requests == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Requests)
}

// Client returns an HTTP client for concurrency parallel requests, with
// enough idle connections to keep them all alive.
func Client(concurrency int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns:        2 * concurrency,
		MaxIdleConnsPerHost: 2 * concurrency,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}

// Load sends n POST requests to target+"/payments" from concurrency
// workers over client, the i-th with key keys(i), and measures them.
func Load(ctx context.Context, client *http.Client, target string, keys Keys, n, concurrency int) Result {
	return LoadSplit(ctx, client, []string{target}, keys, n, concurrency)
}

// LoadSplit is Load over several targets (gateways sharing one store):
// worker w sends all its requests to targets[w%len(targets)], so the
// workers, and the load, are split evenly between them.
func LoadSplit(ctx context.Context, client *http.Client, targets []string, keys Keys, n, concurrency int) Result {
	latencies := make([]time.Duration, n)
	var (
		next     atomic.Int64
		errs     atomic.Int64
		replayed atomic.Int64
		wg       sync.WaitGroup
	)
	cpu0 := cputime.Process()
	start := time.Now()
	for w := range concurrency {
		target := targets[w%len(targets)]
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				status, rep, err := post(ctx, client, target, keys(i))
				latencies[i] = time.Since(t0)
				if err != nil || status != http.StatusCreated {
					errs.Add(1)
				}
				if rep {
					replayed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cputime.Process() - cpu0
	slices.Sort(latencies)
	return Result{
		Requests: n,
		Errors:   int(errs.Load()),
		Replayed: int(replayed.Load()),
		Elapsed:  elapsed,
		P50:      percentile(latencies, 0.50),
		P99:      percentile(latencies, 0.99),
		CPU:      cpu,

		latencies: latencies,
	}
}

func post(ctx context.Context, client *http.Client, target, key string) (status int, replayed bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+"/payments", bytes.NewReader(Body))
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", Credential)
	req.Header.Set(retrysafe.HeaderKey, key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, false, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get(retrysafe.HeaderReplayed) == "true", nil
}

// percentile returns the p-quantile of sorted (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
