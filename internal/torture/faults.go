package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
)

// faulter injects faults until its context ends: Toxiproxy toxics and
// outages on the three links of every gateway, and SIGKILL/SIGTERM of
// gateway processes followed by a restart.
type faulter struct {
	rec      *recorder
	gateways []*gatewayProc
	// Per gateway, its proxies on each link (store is nil for SQLite, whose
	// gateways reach the file directly).
	client, upstream, store []*toxiproxy.Proxy
	log                     func(format string, args ...any)
	next                    map[string]int // per link, the next kind of fault
}

// linkFaults injects one link fault at a time, with pauses between.
func (f *faulter) linkFaults(ctx context.Context) {
	f.next = map[string]int{}
	for {
		sleep(ctx, time.Duration(200+rand.IntN(1300))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		g := rand.IntN(len(f.gateways))
		links := []string{LinkClient, LinkUpstream}
		proxies := []*toxiproxy.Proxy{f.client[g], f.upstream[g]}
		if f.store[g] != nil {
			links, proxies = append(links, LinkStore), append(proxies, f.store[g])
		}
		i := rand.IntN(len(links))
		link, p := links[i], proxies[i]
		// Kinds take turns on each link, so a run of a few minutes has
		// every kind of fault on every link.
		kind := f.next[link] % faultKinds
		f.next[link]++
		if err := f.inject(ctx, g, link, p, kind); err != nil {
			f.log("fault on %s of gateway %d: %v", link, g, err)
		}
	}
}

// faultKinds is the number of kinds of link fault inject knows.
const faultKinds = 7

// inject applies fault number which (0 to faultKinds-1), with random
// parameters, to p for a random time, then lifts it.
func (f *faulter) inject(ctx context.Context, g int, link string, p *toxiproxy.Proxy, which int) error {
	d := time.Duration(300+rand.IntN(2200)) * time.Millisecond
	dir := []string{"upstream", "downstream"}[rand.IntN(2)]
	var (
		kind, toxic, detail string
	)
	switch which {
	case 0:
		lat, jit := 50+rand.IntN(700), rand.IntN(300)
		kind, detail = FaultLatency, fmt.Sprintf("%s %dms ±%dms", dir, lat, jit)
		toxic = fmt.Sprintf(`{"type":"latency","stream":%q,"attributes":{"latency":%d,"jitter":%d}}`, dir, lat, jit)
	case 1:
		n := 20 + rand.IntN(400)
		kind, detail = FaultResetReq, fmt.Sprintf("connections cut after %d bytes sent", n)
		toxic = fmt.Sprintf(`{"type":"limit_data","stream":"upstream","attributes":{"bytes":%d}}`, n)
	case 2:
		n := 20 + rand.IntN(400)
		kind, detail = FaultResetResp, fmt.Sprintf("connections cut after %d bytes received", n)
		toxic = fmt.Sprintf(`{"type":"limit_data","stream":"downstream","attributes":{"bytes":%d}}`, n)
	case 3:
		ms := rand.IntN(500)
		kind, detail = FaultResetPeer, fmt.Sprintf("TCP RST after %dms", ms)
		toxic = fmt.Sprintf(`{"type":"reset_peer","stream":%q,"attributes":{"timeout":%d}}`, dir, ms)
	case 4:
		ms := rand.IntN(2000)
		kind, detail = FaultTimeout, fmt.Sprintf("%s stalls, closed after %dms", dir, ms)
		toxic = fmt.Sprintf(`{"type":"timeout","stream":%q,"attributes":{"timeout":%d}}`, dir, ms)
	case 5:
		rate := 1 + rand.IntN(20)
		kind, detail = FaultBandwidth, fmt.Sprintf("%s %d KB/s, sliced", dir, rate)
		toxic = fmt.Sprintf(`{"type":"bandwidth","stream":%q,"attributes":{"rate":%d}}`, dir, rate)
	case 6:
		d = time.Duration(1000+rand.IntN(3000)) * time.Millisecond
		end := f.rec.fault(FaultDown, link, g, fmt.Sprintf("unreachable for %s", d))
		restart := disable(p)
		sleep(ctx, d)
		err := restart()
		end()
		return err
	}
	end := f.rec.fault(kind, link, g, detail)
	defer end()
	remove, err := addToxic(p, toxic)
	if err != nil {
		return err
	}
	if kind == FaultBandwidth {
		removeSlicer, err := addToxic(p, fmt.Sprintf(`{"type":"slicer","stream":%q,"attributes":{"average_size":64,"size_variation":32,"delay":2000}}`, dir))
		if err == nil {
			defer removeSlicer()
		}
	}
	sleep(ctx, d)
	remove()
	return nil
}

// processFaults kills or stops a gateway now and then and restarts it.
// One gateway is always left running.
func (f *faulter) processFaults(ctx context.Context) {
	for {
		sleep(ctx, time.Duration(2000+rand.IntN(4000))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		g := rand.IntN(len(f.gateways))
		kind, sig := FaultKill, syscall.SIGKILL
		if rand.IntN(3) == 0 {
			kind, sig = FaultTerm, syscall.SIGTERM
		}
		end := f.rec.fault(kind, LinkProcess, g, "")
		if err := f.gateways[g].stop(sig, 30*time.Second); err != nil {
			f.log("%v", err)
		}
		sleep(ctx, time.Duration(200+rand.IntN(1500))*time.Millisecond)
		// A gateway whose store link is down cannot start (it opens the
		// store first): retry, as an orchestrator would.
		for attempt := 0; ; attempt++ {
			err := f.gateways[g].start(context.WithoutCancel(ctx))
			if err == nil {
				break
			}
			if attempt == 60 {
				f.log("restarting gateway %d: %v; giving up", g, err)
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		end()
	}
}
