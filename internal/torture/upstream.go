package torture

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
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
}

// upstream is the counting service behind the gateways. Each gateway gets
// its own listener, so every effect records which gateway forwarded it.
type upstream struct {
	cfg     upstreamConfig
	rec     *recorder
	servers []*http.Server
	addrs   []string
	wg      sync.WaitGroup
}

func startUpstream(cfg upstreamConfig, rec *recorder, gateways int) (*upstream, error) {
	u := &upstream{cfg: cfg, rec: rec}
	for g := range gateways {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			u.close()
			return nil, err
		}
		srv := &http.Server{Handler: u.handler(g), ReadHeaderTimeout: 10 * time.Second}
		u.servers = append(u.servers, srv)
		u.addrs = append(u.addrs, ln.Addr().String())
		u.wg.Go(func() { _ = srv.Serve(ln) })
	}
	return u, nil
}

func (u *upstream) close() {
	for _, s := range u.servers {
		_ = s.Close()
	}
	u.wg.Wait()
}

var errorStatuses = []int{http.StatusBadRequest, http.StatusPaymentRequired, http.StatusInternalServerError, http.StatusServiceUnavailable}

func (u *upstream) handler(gateway int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return // the request never arrived whole: nothing happened
		}
		var in struct {
			Op string `json:"op"`
		}
		if err := json.Unmarshal(body, &in); err != nil || in.Op == "" {
			http.Error(w, "torture upstream: body is not a torture request", http.StatusBadRequest)
			return
		}
		tenant, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		key := r.Header.Get("Idempotency-Key")
		e := Effect{Seq: u.rec.effectSeq(), Gateway: gateway, Tenant: tenant, Key: key, Op: in.Op, Start: time.Now(), Status: http.StatusCreated}
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
		// answer never arrives is still in the history.
		e.End = e.Start.Add(delay)
		if slow {
			u.rec.addFault(Fault{Kind: FaultSlow, Link: LinkService, Gateway: gateway, Start: e.Start, End: e.End, Effect: e.Seq,
				Detail: fmt.Sprintf("effect %d answered after %s", e.Seq, delay)})
		}
		u.rec.effect(e)
		time.Sleep(delay)
		for k, v := range e.Header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(e.Status)
		_, _ = w.Write(e.Body)
	})
}
