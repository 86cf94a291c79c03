package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/store/sealed"
)

const uiDescription = `
Serves the operator page (the one 'retrysafe serve' serves at /ui/ on its
admin listener) on its own, for a fleet of gateways that share one
PostgreSQL, MySQL or Redis store: unknown outcomes (processing records whose lease
ran out), counts by state, the oldest record in flight, and the records with
filters; one record's detail; and a delete that lets the client run the
operation again. Live request rates need a gateway's own admin listener.

The page listens on loopback by default; on any other address it requires
--admin-token-file. It answers only requests addressed to localhost, a
loopback address, the address it listens on, or an --admin-host name
(421 otherwise), which defeats DNS rebinding. Stored responses encrypted by the gateways are shown
decrypted only with the same keys (--encryption-keys-file or
RETRYSAFE_ENCRYPTION_KEYS). See docs/operator-page.md.`

const uiExamples = `  retrysafe ui --store postgres://retrysafe@db:5432/retrysafe
  retrysafe ui --store redis://cache:6379/0 --listen 0.0.0.0:9091 --admin-token-file /run/secrets/admin-tokens`

// uiCommand returns the "ui" command, opening stores with open.
func uiCommand(open storeOpener) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return runUI(ctx, args, stdout, stderr, open)
	}
}

func runUI(ctx context.Context, args []string, stdout, stderr io.Writer, open storeOpener) error {
	fs := newFlagSet("ui", "--store URL [flags]", uiDescription, uiExamples, stdout, stderr)
	storeURL := fs.String("store", storeurl.Default, "idempotency store `URL`: "+storeurl.Accepted)
	listen := fs.String("listen", "127.0.0.1:9091", "`address` of the operator page (port 0: any free port); beyond loopback it needs --admin-token-file")
	var admin adminFlags
	admin.define(fs)
	keysFile := fs.String("encryption-keys-file", "", "decrypt stored responses with the keys in this `file` (the gateways'); or set "+encryptionKeysEnv)
	logFormat := fs.String("log-format", "json", "log `format` on stderr: json or text")
	resolveTTL := fs.Duration("ttl", retrysafe.DefaultTTL, "how long an answer stored by the page's Resolve action is replayed (the gateways' --ttl)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *resolveTTL <= 0 {
		return usagef("--ttl must be positive (got %s)", *resolveTTL)
	}
	logger, err := newLogger(stderr, *logFormat, "info")
	if err != nil {
		return err
	}
	tokens, err := loadAdminTokens(admin.tokenFile)
	if err != nil {
		return err
	}
	ring, err := loadKeyRing(*keysFile, os.Getenv)
	if err != nil {
		return err
	}
	// The page looks at an existing store: it never creates one.
	store, closeStore, err := open(ctx, *storeURL, storeurl.Options{MustExist: true})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer closeStore()
	if ring != nil {
		if store, err = sealed.New(store, ring, sealed.Config{AcceptPlaintext: true}); err != nil {
			return err
		}
	}
	ui, err := gateway.NewUI(gateway.UIConfig{Store: store, Tokens: tokens, Hosts: admin.hosts, Logger: logger, Title: "store " + storeurl.Redact(*storeURL), ResolveTTL: *resolveTTL})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if err := requireTokenBeyondLoopback("--listen", ln.Addr(), tokens); err != nil {
		ln.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(gateway.UIPath, ui)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, gateway.UIPath, http.StatusSeeOther)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, MaxHeaderBytes: gateway.MaxHeaderBytes}
	fmt.Fprintf(stdout, "retrysafe: operator page on http://%s%s (store %s, %s)\n", ln.Addr(), gateway.UIPath, storeurl.Redact(*storeURL), describeAuth(tokens))
	logger.Info("operator page started", "listen", ln.Addr().String(), "store", storeurl.Redact(*storeURL), "encryption", describeKeyRing(ring))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
