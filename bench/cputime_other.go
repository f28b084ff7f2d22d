//go:build !unix

package bench

import "time"

// processCPU returns 0: CPU time is measured on Unix only.
func processCPU() time.Duration { return 0 }
