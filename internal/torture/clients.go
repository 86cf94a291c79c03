package torture

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrysafe/retrysafe"
)

// clientConfig shapes the clients of a run.
type clientConfig struct {
	Clients  int
	Tenants  int
	Gateways []string // base URLs clients reach the gateways at (through the client proxies)
	Modes    []string // each gateway's --in-flight mode
	Deadline time.Time
	MaxOps   int64 // stop after this many requests in all (0: no bound)
	// SharedOps gives the same key of every tenant the same body, so that
	// a gateway that mixed tenants up would replay one tenant's answer to
	// another (the shared-scope mutation).
	SharedOps bool
	// TenantKeys starts every key with its tenant ("tenant-1.k7"), so
	// that keys are unique across tenants: the resolve mode's, whose
	// completer asks the upstream about a key without the caller's
	// headers.
	TenantKeys bool
	// RetryAfter makes the clients wait as long as a 409's Retry-After
	// says (up to 5s) before the next attempt, as a patient client does:
	// its retries then outlast a lease (the silent-cut and
	// dishonest-resolver mutations need them to reach the takeover, or
	// the claim after the completer's release: impatient clients spend
	// their ten attempts inside one lease and the lie goes unseen).
	RetryAfter bool
	// Transport wraps each client's transport (a mutation of what the
	// gateway does, seen from outside).
	Transport func(http.RoundTripper) http.RoundTripper
}

// clients drives the gateways like real callers: each operation gets a new
// key and is retried with the same key after errors, timeouts, 409 and
// 5xx problems, possibly at another gateway; some operations are retried
// again after their answer (to get replays), and some keys are reused
// with another body.
type clients struct {
	cfg  clientConfig
	rec  *recorder
	ops  atomic.Int64
	keys []atomic.Int64 // per tenant: the next key number (tenants share key strings)
}

func (c *clients) run(ctx context.Context) {
	c.keys = make([]atomic.Int64, c.cfg.Tenants)
	var wg sync.WaitGroup
	for i := range c.cfg.Clients {
		wg.Go(func() { c.client(ctx, i) })
	}
	wg.Wait()
}

func (c *clients) more(ctx context.Context) bool {
	if ctx.Err() != nil || time.Now().After(c.cfg.Deadline) {
		return false
	}
	return c.cfg.MaxOps == 0 || c.ops.Load() < c.cfg.MaxOps
}

func (c *clients) client(ctx context.Context, id int) {
	var rt http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}
	if c.cfg.Transport != nil {
		rt = c.cfg.Transport(rt)
	}
	hc := &http.Client{Transport: rt}
	for i := 0; c.more(ctx); i++ {
		t := rand.IntN(c.cfg.Tenants)
		tenant := fmt.Sprintf("tenant-%d", t)
		n := c.keys[t].Add(1)
		key := fmt.Sprintf("key-%d", n)
		if c.cfg.TenantKeys {
			key = fmt.Sprintf("%s%s%d", tenant, keyTenantSep, n)
		}
		op := fmt.Sprintf("%s/%s/c%d-%d", tenant, key, id, i)
		if c.cfg.SharedOps {
			op = key
		}
		final := c.operation(ctx, hc, id, tenant, key, op, false)
		if !final || !c.more(ctx) {
			continue
		}
		switch p := rand.IntN(100); {
		case p < 15: // a late retry: must get the replay
			c.operation(ctx, hc, id, tenant, key, op, false)
		case p < 25: // the key reused for another operation: must get 422
			c.operation(ctx, hc, id, tenant, key, op+"-x", true)
		}
	}
}

// operation sends one operation until it gets a final answer (the
// upstream's, first or replayed, or a stored gateway answer) or gives up.
func (c *clients) operation(ctx context.Context, hc *http.Client, id int, tenant, key, op string, mismatch bool) bool {
	// The same op always has the same body (and so the same fingerprint).
	amount := 0
	for _, c := range op {
		amount = (amount*31 + int(c)) % 10000
	}
	body := fmt.Appendf(nil, `{"op":%q,"amount":%d,"note":"torture"}`, op, amount+1)
	for attempt := range 10 {
		if !c.more(ctx) {
			return false
		}
		c.ops.Add(1)
		g := rand.IntN(len(c.cfg.Gateways))
		q := Request{ID: c.rec.requestID(), Client: id, Gateway: g, Mode: c.cfg.Modes[g], Tenant: tenant, Key: key, Op: op, Mismatch: mismatch}
		retryAfter := c.send(ctx, hc, &q, body)
		c.rec.request(q)
		_, fromUpstream := parseAnswer(q.Body)
		switch {
		case q.Err == "" && (fromUpstream || q.Replayed):
			return true
		case mismatch && q.Status == http.StatusUnprocessableEntity:
			return true
		case q.Err == "" && q.Status == http.StatusConflict && c.cfg.RetryAfter && retryAfter > 0:
			sleep(ctx, min(retryAfter, 5*time.Second)+time.Duration(rand.IntN(300))*time.Millisecond)
		case q.Err == "" && q.Status == http.StatusConflict:
			sleep(ctx, time.Duration(100+rand.IntN(300))*time.Millisecond)
		default:
			sleep(ctx, time.Duration(50*(attempt+1)+rand.IntN(100))*time.Millisecond)
		}
	}
	return false
}

// send makes one attempt, with a client timeout that is sometimes shorter
// than the operation (a client that gives up and retries). It returns the
// answer's Retry-After.
func (c *clients) send(ctx context.Context, hc *http.Client, q *Request, body []byte) (retryAfter time.Duration) {
	timeout := time.Duration(300+rand.IntN(4700)) * time.Millisecond
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	q.Start = time.Now()
	defer func() { q.End = time.Now() }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.Gateways[q.Gateway]+"/payments", bytes.NewReader(body))
	if err != nil {
		q.Err = err.Error()
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+q.Tenant)
	req.Header.Set(retrysafe.HeaderKey, q.Key)
	req.Header.Set(HeaderRequest, strconv.FormatInt(q.ID, 10))
	resp, err := hc.Do(req)
	if err != nil {
		q.Err = err.Error()
		return 0
	}
	defer resp.Body.Close()
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n > 0 {
		retryAfter = time.Duration(n) * time.Second
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		q.Err = "reading the answer: " + err.Error()
		return retryAfter
	}
	q.Status, q.Body = resp.StatusCode, b
	q.Replayed = resp.Header.Get(retrysafe.HeaderReplayed) == "true"
	q.Header = map[string]string{}
	for _, name := range ComparedHeaders {
		if v := resp.Header.Values(name); len(v) > 0 {
			q.Header[name] = v[0]
			if len(v) > 1 {
				q.Header[name] = fmt.Sprint(v)
			}
		}
	}
	return retryAfter
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
