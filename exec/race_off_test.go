//go:build !race

package exec_test

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
