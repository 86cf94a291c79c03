package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/internal/testenv"
)

// TestServeDurabilityWarning: serve on the local Redis, which runs without
// persistence, logs one WARN line about appendonly at start; with
// --accept-weak-durability appendonly that line is INFO; a setting the
// stores do not know is a usage error.
func TestServeDurabilityWarning(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr()
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err != nil {
		testenv.Unreachable(t, "Redis", err)
	} else {
		c.Close()
	}
	store := "redis://" + addr + "/0?retrysafe_prefix=" + testenv.Name("rs-durability") + ":"
	for name, tc := range map[string]struct {
		args  []string
		level string
	}{
		"warned":   {nil, `"level":"WARN"`},
		"accepted": {[]string{"--accept-weak-durability", "sync_binlog,appendonly"}, `"level":"INFO"`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, stop := serveInProcess(t, append([]string{"--upstream", "http://127.0.0.1:1", "--store", store}, tc.args...)...)
			code, stderr := stop()
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, stderr)
			}
			var lines []string
			for _, l := range strings.Split(stderr, "\n") {
				if strings.Contains(l, "store durability") {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], tc.level) || !strings.Contains(lines[0], `"setting":"appendonly"`) {
				t.Errorf("want one %s line about appendonly:\n%s", tc.level, stderr)
			}
		})
	}
	code, _, stderr := runCLI(t, "serve", "--upstream", "http://127.0.0.1:1", "--store", "memory:", "--accept-weak-durability", "appendonyl")
	if code != 2 || !strings.Contains(stderr, `"appendonyl"`) || !strings.Contains(stderr, "synchronous_commit") {
		t.Errorf("a misspelt setting: exit %d, stderr %q; want 2 and the known settings", code, stderr)
	}
}
