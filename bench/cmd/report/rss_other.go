//go:build !unix

package main

import "os"

// peakRSS returns 0: the peak resident set is read on Unix only.
func peakRSS(*os.ProcessState) int64 { return 0 }
