package main

import (
	"fmt"
	"time"
)

// fmtDuration prints a time the one way the CLI prints times: three
// decimals and a unit, µs below a millisecond, ms below a second, else s
// ("12.617 ms", "0.845 µs", "2.500 s").
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond && d > -time.Millisecond:
		return fmt.Sprintf("%.3f µs", float64(d)/float64(time.Microsecond))
	case d < time.Second && d > -time.Second:
		return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.3f s", d.Seconds())
}
