// Command countingupstream is the test upstream of deploy/test-image.sh: a
// plain HTTP service that knows nothing of idempotency keys and counts how
// many times each one reached it. The image test puts the gateway
// container in front of it and reads the counts, so "the upstream ran
// once" is a fact the test observes, not one it assumes.
//
//	countingupstream --listen 127.0.0.1:0 --addr-file /tmp/upstream.addr
//
// Every request other than GET and HEAD is an execution: it gets a new
// sequence number and a random nonce, so two executions never answer the
// same body, and it is counted under its Idempotency-Key header (the
// gateway forwards the key). The answer is 201 with a JSON body:
//
//	{"execution":3,"key":"k-1","method":"POST","path":"/payments","bodySHA256":"…","nonce":"…"}
//
// GET /executions answers the number of executions as plain text;
// GET /executions?key=K the number with Idempotency-Key K. Other GET and
// HEAD requests answer 200 "ok" and are not counted.
//
// It stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "`address` to listen on (port 0: a free port)")
	addrFile := flag.String("addr-file", "", "write the address it listens on to this `file` once it accepts connections")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "countingupstream: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, *listen, *addrFile); err != nil {
		fmt.Fprintln(os.Stderr, "countingupstream:", err)
		os.Exit(1)
	}
}

// serve listens on listen, writes the bound address to addrFile (when not
// empty) and serves a new counter until ctx is done.
func serve(ctx context.Context, listen, addrFile string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newCounter(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if addrFile != "" {
		if err := writeFileAtomic(addrFile, ln.Addr().String()+"\n"); err != nil {
			_ = srv.Close()
			return err
		}
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// writeFileAtomic writes content to a temporary file beside path and
// renames it, so a reader polling for path never sees it half written.
func writeFileAtomic(path, content string) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".countingupstream-*")
	if err != nil {
		return err
	}
	_, werr := f.WriteString(content)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}

// counter is the upstream's handler: it counts executions in total and
// per Idempotency-Key.
type counter struct {
	mu    sync.Mutex
	total int
	byKey map[string]int
}

func newCounter() *counter { return &counter{byKey: make(map[string]int)} }

// execution is the JSON answer to an execution.
type execution struct {
	Execution  int    `json:"execution"`
	Key        string `json:"key"`
	Method     string `json:"method"`
	Path       string `json:"path"`
	BodySHA256 string `json:"bodySHA256"`
	Nonce      string `json:"nonce"`
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if r.URL.Path != "/executions" {
			_, _ = io.WriteString(w, "ok\n")
			return
		}
		c.mu.Lock()
		n := c.total
		if r.URL.Query().Has("key") {
			n = c.byKey[r.URL.Query().Get("key")]
		}
		c.mu.Unlock()
		_, _ = io.WriteString(w, strconv.Itoa(n)+"\n")
		return
	}
	h := sha256.New()
	if _, err := io.Copy(h, r.Body); err != nil {
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var nonce [12]byte
	_, _ = rand.Read(nonce[:])
	key := r.Header.Get("Idempotency-Key")
	c.mu.Lock()
	c.total++
	c.byKey[key]++
	n := c.total
	c.mu.Unlock()
	body, err := json.Marshal(execution{
		Execution:  n,
		Key:        key,
		Method:     r.Method,
		Path:       r.URL.Path,
		BodySHA256: hex.EncodeToString(h.Sum(nil)),
		Nonce:      hex.EncodeToString(nonce[:]),
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Execution", strconv.Itoa(n))
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(append(body, '\n'))
}
