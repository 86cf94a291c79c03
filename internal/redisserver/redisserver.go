// Package redisserver starts private redis-server processes for tests that
// must kill, pause, promote or reshard a server: a Redis Cluster of several
// masters, or a master with replicas. Every server listens on its own free
// 127.0.0.1 port, keeps its files in the test's temp directory, persists
// nothing (--save "" --appendonly no) and is killed when the test ends. The
// machine's shared Redis on 6379 is never touched.
//
// It drives the servers with the redis-server and redis-cli binaries and
// imports only the standard library, so every module can use it. When a
// binary is missing or a server does not start, the test is skipped
// locally and fails under CI=true ([testenv.Unreachable]).
package redisserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/internal/testenv"
)

// Server is one redis-server process started by [Start].
type Server struct {
	// Addr is "127.0.0.1:PORT".
	Addr string
	// Port is the client port.
	Port int

	t   testing.TB
	cmd *exec.Cmd
}

// binaries returns the paths of redis-server and redis-cli, or reports
// the test unreachable.
func binaries(t testing.TB) (server, cli string) {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Unreachable(t, "redis-server binary", err)
	}
	cli, err = exec.LookPath("redis-cli")
	if err != nil {
		testenv.Unreachable(t, "redis-cli binary", err)
	}
	return server, cli
}

// freePort returns a port p such that p and p+10000 (a cluster node's bus
// port) can be bound on 127.0.0.1 right now.
func freePort(t testing.TB) int {
	t.Helper()
	for range 200 {
		p := 20000 + rand.IntN(20000)
		l1, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		_ = l1.Close()
		if err != nil {
			continue
		}
		_ = l2.Close()
		return p
	}
	t.Fatal("redisserver: no free port pair found")
	return 0
}

// Start starts a redis-server with the given extra arguments (for example
// "--replicaof", "127.0.0.1", "6380") and waits until it answers PING. The
// server is killed at the end of the test.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, _ := binaries(t)
	var lastErr error
	for range 3 { // a port can be taken between freePort and the bind
		port := freePort(t)
		dir := t.TempDir()
		full := append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log"),
			"--protected-mode", "no",
			"--repl-diskless-sync-delay", "0", // a replica syncs at once
		}, args...)
		lastErr = nil
		cmd := exec.Command(bin, full...)
		if err := cmd.Start(); err != nil {
			testenv.Unreachable(t, "redis-server", err)
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, t: t, cmd: cmd}
		done := make(chan struct{})
		var waitErr error
		go func() { waitErr = cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGCONT) // in case a test left it stopped
			_ = cmd.Process.Kill()
			<-done
		})
		deadline := time.Now().Add(10 * time.Second)
		for lastErr == nil && time.Now().Before(deadline) {
			select {
			case <-done:
				log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
				lastErr = fmt.Errorf("redis-server exited: %v: %s", waitErr, tail(log))
				continue
			default:
			}
			// The server on the port must be this process, not another
			// test's that took the port first (ours then exits).
			if out, err := s.TryCLI("INFO", "server"); err == nil && hasLine(out, "process_id:"+strconv.Itoa(cmd.Process.Pid)) {
				return s
			}
			time.Sleep(20 * time.Millisecond)
		}
		if lastErr == nil {
			lastErr = errors.New("redis-server did not answer PING within 10s")
		}
	}
	testenv.Unreachable(t, "redis-server", lastErr)
	return nil
}

// hasLine reports whether text has a line that is want, ignoring
// surrounding white space (INFO ends lines with \r\n).
func hasLine(text, want string) bool {
	for line := range strings.SplitSeq(text, "\n") {
		if strings.TrimSpace(line) == want {
			return true
		}
	}
	return false
}

func tail(b []byte) string {
	if len(b) > 800 {
		b = b[len(b)-800:]
	}
	return string(b)
}

// TryCLI runs redis-cli against the server with args and returns its
// trimmed output. A reply that is a Redis error is returned as an error.
func (s *Server) TryCLI(args ...string) (string, error) {
	_, cli := binaries(s.t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.Port)}, args...)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("redis-cli %s: %v: %s%s", strings.Join(args, " "), err, out.String(), stderr.String())
	}
	res := strings.TrimSpace(out.String())
	if strings.HasPrefix(res, "ERR ") || strings.HasPrefix(res, "(error)") {
		return res, fmt.Errorf("redis-cli %s: %s", strings.Join(args, " "), res)
	}
	return res, nil
}

// CLI is [Server.TryCLI] that fails the test on an error.
func (s *Server) CLI(args ...string) string {
	s.t.Helper()
	out, err := s.TryCLI(args...)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// Info returns the value of one field of INFO section.
func (s *Server) Info(section, field string) string {
	s.t.Helper()
	for line := range strings.SplitSeq(s.CLI("INFO", section), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// Pause stops the process with SIGSTOP: it keeps its sockets but answers
// nothing, replication included, until [Server.Resume].
func (s *Server) Pause() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatal(err)
	}
}

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatal(err)
	}
}

// Kill kills the process with SIGKILL: whatever it has not replicated is
// gone.
func (s *Server) Kill() {
	s.t.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		s.t.Fatal(err)
	}
}

// WaitFor polls cond every 20ms until it holds or timeout passes, and fails
// the test with what on timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartReplica starts a server that replicates master and waits until its
// link is up, it has the master's data, and it acknowledges master's
// writes: a write on master followed by WAIT 1 gets its answer at once.
//
// The link being up is not enough: right after it, the first write's WAIT
// took 0.7 to 0.95 s in 7 of 15 tries (apparently until the replica's
// periodic, once-a-second REPLCONF ACK), so TestWaitRetriedOnNewConnection
// (store/redis), whose first write waits at most 1 s for the replica,
// failed under load. Once one write was acknowledged, the next ones are
// in milliseconds.
func StartReplica(t testing.TB, master *Server) *Server {
	t.Helper()
	r := Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	WaitFor(t, 20*time.Second, "replica link up", func() bool {
		return r.Info("replication", "master_link_status") == "up"
	})
	WaitFor(t, 20*time.Second, "a write on the master acknowledged by the replica within 100ms", master.writeAcked)
	return r
}

// writeAcked writes to s on a connection of its own (sets and deletes the
// key redisserver:ack) and reports whether WAIT 1 100 on that connection
// then counts a replica.
func (s *Server) writeAcked() bool {
	c, err := net.DialTimeout("tcp", s.Addr, 5*time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return false
	}
	if _, err := io.WriteString(c, "SET redisserver:ack 1\r\nDEL redisserver:ack\r\nWAIT 1 100\r\n"); err != nil {
		return false
	}
	r := bufio.NewReader(c)
	var reply string
	for range 3 { // +OK, :1, then WAIT's count
		line, err := r.ReadString('\n')
		if err != nil {
			return false
		}
		reply = strings.TrimSpace(line)
	}
	return reply == ":1"
}

// Cluster is a Redis Cluster of masters started by [StartCluster].
type Cluster struct {
	Nodes []*Server
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// NodeID returns the cluster node ID of n.
func NodeID(n *Server) string { return n.CLI("CLUSTER", "MYID") }

// StartCluster starts masters cluster-enabled servers, joins them with
// redis-cli --cluster create (slots split evenly, no replicas) and waits
// until every node reports cluster_state:ok and knows every node.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	c := &Cluster{}
	for range masters {
		dir := t.TempDir()
		c.Nodes = append(c.Nodes, Start(t,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "5000"))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := c.Nodes[0].TryCLI(args...)
	if err != nil || !strings.Contains(out, "[OK] All 16384 slots covered") {
		testenv.Unreachable(t, "redis-cli --cluster create", fmt.Errorf("%v: %s", err, out))
	}
	WaitFor(t, 30*time.Second, "cluster_state:ok on every node", func() bool {
		for _, n := range c.Nodes {
			if n.Info("cluster", "cluster_enabled") != "1" {
				return false
			}
			info, err := n.TryCLI("CLUSTER", "INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(masters)) {
				return false
			}
		}
		return true
	})
	return c
}

// SlotOwner returns the node that serves slot according to node 0.
func (c *Cluster) SlotOwner(slot int) *Server {
	c.Nodes[0].t.Helper()
	for line := range strings.SplitSeq(c.Nodes[0].CLI("CLUSTER", "NODES"), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 {
			continue
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue
			}
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			l, err1 := strconv.Atoi(lo)
			h, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && slot >= l && slot <= h {
				for _, n := range c.Nodes {
					if strings.HasPrefix(f[1], n.Addr+"@") {
						return n
					}
				}
			}
		}
	}
	c.Nodes[0].t.Fatalf("no node serves slot %d", slot)
	return nil
}
