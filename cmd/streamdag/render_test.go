package main

import (
	"bytes"
	"os"
	osexec "os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/topology"
)

// needDot returns the path of Graphviz's dot. Where it is absent the test
// skips, saying how to install it; when CI is set it fails instead, so CI
// never passes by skipping.
func needDot(t *testing.T) string {
	t.Helper()
	dot, err := osexec.LookPath("dot")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Graphviz dot not on PATH (CI installs it: apt-get install graphviz): %v", err)
		}
		t.Skipf("Graphviz dot not on PATH: rendering not checked (apt-get install graphviz): %v", err)
	}
	return dot
}

// The plan of every embedded machine (8 simulated GPUs and fewer), with
// and without a lost device, renders with the installed Graphviz (Debian's
// is 2.43) without errors or warnings, directly and through 'streamdag
// graph'.
func TestRunFlightsPlanDOTRendersOnSimulatedGPUs(t *testing.T) {
	dot := needDot(t)
	for _, m := range topology.Machines() {
		for _, streams := range []string{"1", "2", "4"} {
			t.Run(m+"/streams="+streams, func(t *testing.T) {
				renderPlan(t, dot, m, streams, "")
			})
		}
	}
	// The case: the 3-million-row file on a DGX-1.
	t.Run("flights-3m/dgx1-v100", func(t *testing.T) {
		renderPlan(t, dot, "dgx1-v100", "2", testdata.File(t, "flights-3m.parquet"))
	})
}

// renderPlan renders the plan of a flights run on machine m (of input, or
// the embedded sample when "") with dot, and through 'streamdag graph'.
func renderPlan(t *testing.T, dot, m, streams, input string) {
	dir := t.TempDir()
	plan, svg := filepath.Join(dir, "p.dot"), filepath.Join(dir, "p.svg")
	args := []string{"run", "flights", "--quiet", "--topology", "sim:" + m, "--streams", streams, "--dot", plan}
	if input != "" {
		args = append(args, "--input", input)
	}
	code, _, errs := runArgs(t, args...)
	require.Equal(t, 0, code, errs)
	src, err := os.ReadFile(plan)
	require.NoError(t, err)
	c := osexec.CommandContext(t.Context(), dot, "-Tsvg")
	c.Stdin = bytes.NewReader(src)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	require.NoError(t, err, "dot -Tsvg %s: %s", m, stderr.String())
	assert.Empty(t, stderr.String(), "no Graphviz errors or warnings")
	assert.Contains(t, string(out), "gpu0 stream 0")

	code, _, errs = runArgs(t, "graph", "--in", plan, "--out", svg)
	require.Equal(t, 0, code, errs)
	b, err := os.ReadFile(svg)
	require.NoError(t, err)
	assert.Contains(t, string(b), "<svg")
}
