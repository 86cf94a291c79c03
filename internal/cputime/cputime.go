// Package cputime reads the CPU time of the running process, for
// benchmarks that report CPU per operation: on a shared machine it moves
// less with the neighbours' load than wall-clock time, and it shows what
// time spent waiting (for a disk, a lock, a server) does not cost.
package cputime

import (
	"syscall"
	"time"
)

// Process returns the user + system CPU time the process has used so far,
// all threads included, or 0 if the system does not say.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
