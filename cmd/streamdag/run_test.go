package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFlightsGC checks that a flights run sets the collector's target to
// flightsGCPercent, and leaves the one GOGC sets alone.
func TestFlightsGC(t *testing.T) {
	const before = 70
	old := debug.SetGCPercent(before)
	defer debug.SetGCPercent(old)

	flightsGC(func(string) string { return "70" })
	assert.Equal(t, before, debug.SetGCPercent(before), "GOGC set: the target stays")

	flightsGC(func(k string) string {
		assert.Equal(t, "GOGC", k)
		return ""
	})
	assert.Equal(t, flightsGCPercent, debug.SetGCPercent(before), "GOGC unset: flightsGCPercent")
}
