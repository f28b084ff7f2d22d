//go:build !race

package kvio

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
