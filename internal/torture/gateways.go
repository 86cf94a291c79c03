package torture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/retrysafe/retrysafe/internal/testenv"
)

// BuildBinary builds the retrysafe command into dir and returns its path.
func BuildBinary(ctx context.Context, dir string, race bool) (string, error) {
	bin := filepath.Join(dir, "retrysafe")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "github.com/retrysafe/retrysafe/cmd/retrysafe")
	cmd := exec.CommandContext(ctx, "go", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
}

// gatewayProc is one `retrysafe serve` process, restartable on the same
// addresses.
type gatewayProc struct {
	index  int
	bin    string
	flags  []string
	args   []string
	listen string // the gateway's own address (clients reach it through a proxy)
	admin  string
	log    *os.File
	bound  bool // started once: its addresses are in use by proxies now

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// freeAddr returns an address of 127.0.0.1 that was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func newGateway(index int, bin, logPath string, flags []string) (*gatewayProc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	g := &gatewayProc{index: index, bin: bin, flags: flags, log: f}
	if err := g.pickAddrs(); err != nil {
		f.Close()
		return nil, err
	}
	return g, nil
}

// pickAddrs chooses the gateway's two addresses.
func (g *gatewayProc) pickAddrs() error {
	listen, err := freeAddr()
	if err != nil {
		return err
	}
	admin, err := freeAddr()
	if err != nil {
		return err
	}
	g.listen, g.admin = listen, admin
	g.args = append([]string{"serve", "--listen", listen, "--admin-listen", admin}, g.flags...)
	return nil
}

// start starts the process and waits until its admin listener answers. An
// address that was free a moment ago may be taken meanwhile (other tests
// of the run open connections from the same port range): before the first
// successful start, a gateway that could not bind gets new addresses and
// starts again; later restarts keep the addresses the proxies point to.
func (g *gatewayProc) start(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := g.startOnce(ctx)
		if err == nil || g.bound || attempt == 5 || !errors.Is(err, errAddrInUse) {
			if err == nil {
				g.bound = true
			}
			return err
		}
		if err := g.pickAddrs(); err != nil {
			return err
		}
	}
}

// errAddrInUse marks a start that failed because an address was taken.
var errAddrInUse = errors.New("address already in use")

// start starts the process and waits until its admin listener answers.
func (g *gatewayProc) startOnce(ctx context.Context) error {
	g.mu.Lock()
	cmd := exec.Command(g.bin, g.args...)
	cmd.Stdout, cmd.Stderr = g.log, g.log
	if err := cmd.Start(); err != nil {
		g.mu.Unlock()
		return fmt.Errorf("gateway %d: %w", g.index, err)
	}
	done := make(chan struct{})
	g.cmd, g.done = cmd, done
	g.mu.Unlock()
	go func() { _ = cmd.Wait(); close(done) }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-done:
			log, _ := os.ReadFile(g.log.Name())
			tail := log[max(0, len(log)-600):]
			err := fmt.Errorf("gateway %d exited while starting (%v); the end of %s:\n%s", g.index, cmd.ProcessState, g.log.Name(), tail)
			if bytes.Contains(tail, []byte("address already in use")) {
				err = fmt.Errorf("%w: %w", err, errAddrInUse)
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := testenv.HTTPClient.Get("http://" + g.admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway %d: /healthz did not answer within a minute; see %s", g.index, g.log.Name())
		}
	}
}

// signal sends sig and waits up to wait for the process to exit (SIGKILL
// after that).
func (g *gatewayProc) stop(sig syscall.Signal, wait time.Duration) error {
	g.mu.Lock()
	cmd, done := g.cmd, g.done
	g.mu.Unlock()
	if cmd == nil {
		return errors.New("not started")
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("gateway %d did not exit within %s of %s; killed", g.index, wait, sig)
	}
}

func (g *gatewayProc) close() {
	_ = g.stop(syscall.SIGKILL, 10*time.Second)
	_ = g.log.Close()
}
