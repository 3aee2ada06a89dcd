//go:build linux

package rocsync

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used, every thread together
// (getrusage RUSAGE_SELF): unlike wall time it does not grow while other
// processes hold the CPUs.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
