//go:build unix

package main

import (
	"os"
	"runtime"
	"syscall"
)

// peakRSS returns the peak resident set of a finished process in bytes
// (getrusage's ru_maxrss: KiB on Linux, bytes on macOS). On Linux it
// includes what the child shared with its parent between fork and exec,
// so it is at least the parent's resident set at the start.
func peakRSS(ps *os.ProcessState) int64 {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	if runtime.GOOS == "darwin" {
		return ru.Maxrss
	}
	return ru.Maxrss << 10
}
