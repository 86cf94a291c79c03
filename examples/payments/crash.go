package main

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/examples/payments/service"
)

// crashHook parses --crash-at (POINT=FRACTION[,POINT=FRACTION…]) into a
// service.Config.Crash that kills this process (SIGKILL on Unix: no
// deferred call, no shutdown, as a crash) at POINT in that fraction of
// the attempts. Which attempts is decided by a hash of the point, the
// operation's key and its attempt number, so a chaos run that repeats its
// keys repeats its kills, and an attempt that resumes a killed one may be
// killed too. Before dying it prints, once, "payments: crash at POINT (attempt
// N)" to stderr, for the test to count. An empty spec gives nil.
func crashHook(spec string) (func(string, *retrysafe.Operation), error) {
	if spec == "" {
		return nil, nil
	}
	rates := map[string]float64{}
	for _, item := range strings.Split(spec, ",") {
		point, frac, ok := strings.Cut(strings.TrimSpace(item), "=")
		f, err := strconv.ParseFloat(frac, 64)
		if !ok || err != nil || f < 0 || f > 1 || (point != service.CrashAfterCharge && point != service.CrashAfterCheckpoint) {
			return nil, fmt.Errorf("--crash-at %q: want POINT=FRACTION with POINT %s or %s and FRACTION from 0 to 1",
				item, service.CrashAfterCharge, service.CrashAfterCheckpoint)
		}
		rates[point] = f
	}
	var dying sync.Mutex // never unlocked: one crash per process
	return func(point string, op *retrysafe.Operation) {
		if roll(point, op.Key(), op.Attempt()) >= rates[point] {
			return
		}
		dying.Lock()
		fmt.Fprintf(os.Stderr, "payments: crash at %s (attempt %d)\n", point, op.Attempt())
		p, _ := os.FindProcess(os.Getpid())
		_ = p.Kill()
		select {} // the signal is on its way
	}, nil
}

// roll maps a point, key and attempt to [0, 1), uniformly: attempts of
// one key roll independently.
func roll(point, key string, attempt int) float64 {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\n%s\n%d", point, key, attempt))
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / math.Exp2(53)
}
