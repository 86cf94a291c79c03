package torture

import (
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
	args   []string
	listen string // the gateway's own address (clients reach it through a proxy)
	admin  string
	log    *os.File

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
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := freeAddr()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--listen", listen, "--admin-listen", admin}, flags...)
	return &gatewayProc{index: index, bin: bin, args: args, listen: listen, admin: admin, log: f}, nil
}

// start starts the process and waits until its admin listener answers.
func (g *gatewayProc) start(ctx context.Context) error {
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
			return fmt.Errorf("gateway %d exited while starting (%v); see %s", g.index, cmd.ProcessState, g.log.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := http.Get("http://" + g.admin + "/healthz")
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
