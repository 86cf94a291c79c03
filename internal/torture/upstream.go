package torture

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// answerBody is the body of the upstream's answer for one effect. It names
// the effect, the tenant and key the upstream saw and the request's op, so
// the checker can tell whose answer a client got.
func answerBody(seq int64, tenant, key, op string) []byte {
	b, _ := json.Marshal(answer{Effect: seq, Tenant: tenant, Key: key, Op: op})
	return b
}

// upstreamHeader is the set of headers the upstream sends with an answer
// (the ones in ComparedHeaders).
func upstreamHeader(seq int64, tenant string) map[string]string {
	return map[string]string{
		"Content-Type":     "application/json",
		"X-Torture-Effect": strconv.FormatInt(seq, 10),
		"X-Torture-Tenant": tenant,
		"Cache-Control":    "no-store",
	}
}

// upstreamConfig shapes the counting upstream's behaviour.
type upstreamConfig struct {
	// ErrorRate is the share of answers that are 4xx or 5xx.
	ErrorRate float64
	// SlowRate is the share of answers that take longer than Slow, which
	// the harness sets above the gateways' --upstream-timeout: each is
	// recorded as a fault.
	SlowRate float64
	Slow     time.Duration
	// Delay is the upper bound of an ordinary answer's random delay.
	Delay time.Duration
	// Fence refuses attempts the resolve URL declared not done (the
	// resolve mode; see resolveHandler).
	Fence bool
	// Dishonest makes the resolve URL answer not_done about every key,
	// effect or not (the dishonest-resolver mutation).
	Dishonest bool
	// SilentCutRate is the share of effects whose answer the upstream
	// drops by closing the connection after acting, with no injected
	// fault (the silent-cut mutation).
	SilentCutRate float64
}

// HeaderRequest carries the client request's ID to the upstream (the
// gateway forwards it like any header; it is not in the fingerprint).
const HeaderRequest = "X-Torture-Request"

// headerAttempt is the attempt number the gateway forwards.
const headerAttempt = "Idempotency-Attempt"

// keyState is what the upstream knows of one tenant's key: its first
// effect, the requests for it that it is reading (in flight: they may
// still act), and the highest attempt it declared not done.
type keyState struct {
	effect   *Effect
	inFlight int
	fence    int
}

// upstream is the counting service behind the gateways. Each gateway gets
// its own listener, so every effect records which gateway forwarded it.
// In the resolve mode it also answers the gateways' resolve URL,
// honestly, from its own effect log.
type upstream struct {
	cfg     upstreamConfig
	rec     *recorder
	servers []*http.Server
	addrs   []string
	wg      sync.WaitGroup

	conns atomic.Int64 // the last connection number given out

	mu     sync.Mutex
	keys   map[tenantKey]*keyState
	closed map[int64]time.Time // when each closed connection closed
}

type connKey struct{}

func startUpstream(cfg upstreamConfig, rec *recorder, gateways int) (*upstream, error) {
	u := &upstream{cfg: cfg, rec: rec, keys: map[tenantKey]*keyState{}, closed: map[int64]time.Time{}}
	for g := range gateways {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			u.close()
			return nil, err
		}
		ids := sync.Map{} // net.Conn → its number
		mux := http.NewServeMux()
		mux.Handle("POST /resolve", u.resolveHandler(g))
		mux.Handle("/", u.handler(g))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				id := u.conns.Add(1)
				ids.Store(c, id)
				return context.WithValue(ctx, connKey{}, id)
			},
			ConnState: func(c net.Conn, s http.ConnState) {
				if s != http.StateClosed && s != http.StateHijacked {
					return
				}
				if id, ok := ids.LoadAndDelete(c); ok {
					u.mu.Lock()
					u.closed[id.(int64)] = time.Now()
					u.mu.Unlock()
				}
			},
		}
		u.servers = append(u.servers, srv)
		u.addrs = append(u.addrs, ln.Addr().String())
		u.wg.Go(func() { _ = srv.Serve(ln) })
	}
	return u, nil
}

// settle records, for every effect, when its connection closed.
func (u *upstream) settle() {
	u.mu.Lock()
	closed := maps.Clone(u.closed)
	u.mu.Unlock()
	u.rec.connClosed(closed)
}

func (u *upstream) close() {
	for _, s := range u.servers {
		_ = s.Close()
	}
	u.wg.Wait()
}

var errorStatuses = []int{http.StatusBadRequest, http.StatusPaymentRequired, http.StatusInternalServerError, http.StatusServiceUnavailable}

func (u *upstream) state(tk tenantKey) *keyState {
	ks := u.keys[tk]
	if ks == nil {
		ks = &keyState{}
		u.keys[tk] = ks
	}
	return ks
}

// hangUp closes the request's connection without an answer.
func hangUp(w http.ResponseWriter) {
	if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = c.Close()
	}
}

func (u *upstream) handler(gateway int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		key := r.Header.Get("Idempotency-Key")
		attempt, _ := strconv.Atoi(r.Header.Get(headerAttempt))
		reqID, _ := strconv.ParseInt(r.Header.Get(HeaderRequest), 10, 64)
		tk := tenantKey{tenant, key}
		// From here until its body is read whole (or not), the request
		// is in flight for its key: it may still act.
		u.mu.Lock()
		ks := u.state(tk)
		if u.cfg.Fence && key != "" && attempt <= ks.fence {
			fence := ks.fence
			u.mu.Unlock()
			u.rec.refusal(Refusal{Gateway: gateway, Tenant: tenant, Key: key, Attempt: attempt, Fence: fence, Request: reqID, At: time.Now()})
			hangUp(w)
			return
		}
		ks.inFlight++
		u.mu.Unlock()

		body, err := io.ReadAll(r.Body)
		var in struct {
			Op string `json:"op"`
		}
		bad := err == nil && (json.Unmarshal(body, &in) != nil || in.Op == "")
		if err != nil || bad {
			u.mu.Lock()
			ks.inFlight--
			u.mu.Unlock()
			if bad {
				http.Error(w, "torture upstream: body is not a torture request", http.StatusBadRequest)
			}
			return // else the request never arrived whole: nothing happened
		}
		conn, _ := r.Context().Value(connKey{}).(int64)
		e := Effect{Seq: u.rec.effectSeq(), Gateway: gateway, Request: reqID, Attempt: attempt, Conn: conn,
			Tenant: tenant, Key: key, Op: in.Op, Start: time.Now(), Status: http.StatusCreated}
		var delay time.Duration
		if u.cfg.Delay > 0 {
			delay = rand.N(u.cfg.Delay)
		}
		slow := u.cfg.SlowRate > 0 && rand.Float64() < u.cfg.SlowRate
		if slow {
			delay = u.cfg.Slow
		}
		if rand.Float64() < u.cfg.ErrorRate {
			e.Status = errorStatuses[rand.N(len(errorStatuses))]
		}
		e.Header = upstreamHeader(e.Seq, tenant)
		e.Body = answerBody(e.Seq, tenant, key, in.Op)
		// Recorded before the answer goes out, so that an effect whose
		// answer never arrives is still in the history, and in the same
		// step as the key's state, so that a resolve call sees it.
		e.End = e.Start.Add(delay)
		if slow {
			u.rec.addFault(Fault{Kind: FaultSlow, Link: LinkService, Gateway: gateway, Start: e.Start, End: e.End, Effect: e.Seq,
				Detail: fmt.Sprintf("effect %d answered after %s", e.Seq, delay)})
		}
		silent := u.cfg.SilentCutRate > 0 && rand.Float64() < u.cfg.SilentCutRate
		u.mu.Lock()
		ks.inFlight--
		if ks.effect == nil {
			ks.effect = &e
		}
		u.rec.effect(e)
		u.mu.Unlock()
		if silent {
			u.rec.addFault(Fault{Kind: FaultSilentCut, Link: LinkService, Gateway: gateway, Start: e.Start, End: e.Start, Effect: e.Seq,
				Detail: fmt.Sprintf("effect %d: answer dropped by the upstream (mutation)", e.Seq)})
			hangUp(w)
			return
		}
		// The connection ending before the answer is written (the
		// gateway gave up, or a fault closed it) is a fact about this
		// request: the checker attributes repeats with it.
		var cutAt atomic.Int64
		stop := context.AfterFunc(r.Context(), func() { cutAt.Store(time.Now().UnixNano()) })
		time.Sleep(delay)
		for k, v := range e.Header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(e.Status)
		_, _ = w.Write(e.Body)
		if !stop() {
			u.rec.cut(e.Seq, time.Unix(0, cutAt.Load()))
		}
	})
}

// resolveHandler answers the gateways' resolve URL (docs/gateway.md,
// "Unknown outcomes") from the upstream's own log: done, with the answer
// it gave, when the key had an effect; unknown while a request for the key
// is being read (it may still act); otherwise not_done, and from then on
// it refuses (hangs up on) every attempt of the key up to that one: the
// attempt asked about may still be on its way (its gateway lost the
// store, not the upstream), and acting on it after the takeover's attempt
// ran would be a second effect. The completer's calls carry no
// Authorization: the key alone names the tenant (the resolve mode's keys
// start with their tenant).
func (u *upstream) resolveHandler(gateway int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Key     string `json:"key"`
			Attempt int    `json:"attempt"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Key == "" {
			http.Error(w, "torture upstream: not a resolve call", http.StatusBadRequest)
			return
		}
		v := Resolve{Gateway: gateway, Source: SourceRetry, Key: in.Key, Attempt: in.Attempt}
		tenant, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			v.Source = SourceCompleter
			tenant, _, _ = strings.Cut(in.Key, keyTenantSep)
		}
		v.Tenant = tenant
		var reply []byte
		u.mu.Lock()
		ks := u.state(tenantKey{tenant, in.Key})
		switch e := ks.effect; {
		case e != nil && !u.cfg.Dishonest:
			v.Outcome, v.Effect = ResolveDone, e.Seq
			headers := map[string][]string{}
			for k, val := range e.Header {
				headers[k] = []string{val}
			}
			reply, _ = json.Marshal(map[string]any{"outcome": ResolveDone, "status": e.Status, "headers": headers,
				"body": base64.StdEncoding.EncodeToString(e.Body)})
		case ks.inFlight > 0 && !u.cfg.Dishonest:
			v.Outcome = ResolveUnknown
		default:
			v.Outcome = ResolveNotDone
			ks.fence = max(ks.fence, in.Attempt)
		}
		v.At = time.Now()
		u.mu.Unlock()
		u.rec.resolve(v)
		if reply == nil {
			reply, _ = json.Marshal(map[string]string{"outcome": v.Outcome})
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(reply)
	})
}

// keyTenantSep separates the tenant from the rest of a resolve-mode key.
const keyTenantSep = ".k"
