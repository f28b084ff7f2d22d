//go:build race

package dag_test

// raceEnabled reports whether the race detector is on.
const raceEnabled = true
