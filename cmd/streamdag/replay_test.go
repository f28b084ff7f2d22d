package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --replay N captures the run and replays it: the CSV is the one a plain
// run writes, byte for byte, and the summary says the capture was
// replayed; with a failing kernel the capture is not replayed, and the
// summary says why. Without --replay the summary has no capture line.
func TestRunFlightsReplay(t *testing.T) {
	dir := t.TempDir()
	plainPath, replayPath := filepath.Join(dir, "plain.csv"), filepath.Join(dir, "replay.csv")
	code, _, errs := runArgs(t, "run", "flights", "--streams", "2", "--out", plainPath)
	require.Equal(t, 0, code, errs)
	assert.NotContains(t, errs, "replayed capture")
	assert.NotContains(t, errs, "ran plan")
	code, _, errs = runArgs(t, "run", "flights", "--streams", "2", "--replay", "2", "--out", replayPath)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "\nreplayed capture 2 times (engine lists)\n")
	plain, err := os.ReadFile(plainPath)
	require.NoError(t, err)
	replayed, err := os.ReadFile(replayPath)
	require.NoError(t, err)
	assert.Equal(t, string(plain), string(replayed))

	code, _, errs = runArgs(t, "run", "flights", "--streams", "2", "--replay", "1", "--fail", "filter[1]")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "\nran plan, not replayed: exec: capture doomed: kernel \"filter[1]\" failed: exec: kernel \"filter[1]\": dag: injected failure\n")
}
