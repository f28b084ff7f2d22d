//go:build race

package shard_test

// raceEnabled: the tests run under the race detector.
const raceEnabled = true
