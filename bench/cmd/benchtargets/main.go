// Command benchtargets starts the load harness's three targets as one
// process and keeps them running, so that an external load generator
// (wrk, hey, k6) can measure them as a second opinion on the go test
// benchmark:
//
//	upstream  a trivial payments handler (201, small JSON)
//	plain     httputil.ReverseProxy in front of it
//	gateway   the retrysafe gateway in front of it, on --store
//
// Usage:
//
//	go run ./bench/cmd/benchtargets --store sqlite:/tmp/bench.db
//	wrk -t2 -c32 -d10s -s bench/wrk/new-keys.lua http://127.0.0.1:PORT/payments
//
// It prints the three URLs and runs until interrupted.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/retrysafe/retrysafe/bench"
	"github.com/retrysafe/retrysafe/internal/storeurl"
)

func main() {
	storeURL := flag.String("store", "memory:", "idempotency store `URL`: "+storeurl.Accepted)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	store, closeStore, err := storeurl.Open(ctx, *storeURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtargets:", err)
		os.Exit(1)
	}
	defer closeStore()
	upstream := bench.StartUpstream()
	defer upstream.Close()
	plain := bench.StartPlainProxy(upstream.URL)
	defer plain.Close()
	gw, err := bench.StartGateway(upstream.URL, store)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtargets:", err)
		os.Exit(1)
	}
	defer gw.Close()
	fmt.Printf("upstream %s\nplain %s\ngateway %s\n", upstream.URL, plain.URL, gw.URL)
	<-ctx.Done()
	fmt.Printf("upstream calls: %d\n", upstream.Calls())
}
