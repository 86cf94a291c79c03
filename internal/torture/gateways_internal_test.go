package torture

import (
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestGatewayStartsOnNewAddressesWhenOneIsTaken: an address that was free
// when it was picked and is taken before the gateway binds it (by another
// test's connection, say) does not fail the run: the first start picks new
// addresses. After a successful start the addresses stay (restarts keep
// them, since proxies point at them).
func TestGatewayStartsOnNewAddressesWhenOneIsTaken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin, err := BuildBinary(t.Context(), dir, false)
	if err != nil {
		t.Fatal(err)
	}
	g, err := newGateway(0, bin, filepath.Join(dir, "gateway.log"), []string{
		"--upstream", "http://127.0.0.1:9", "--store", "memory:",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.close)
	taken, err := net.Listen("tcp", g.listen)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	first := g.listen
	if err := g.start(t.Context()); err != nil {
		t.Fatalf("start with its address taken: %v", err)
	}
	if g.listen == first {
		t.Fatalf("gateway still on the taken address %s", first)
	}
	if err := g.stop(syscall.SIGTERM, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	second := g.listen
	if err := g.start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if g.listen != second {
		t.Fatalf("a restart moved the gateway from %s to %s", second, g.listen)
	}
}
