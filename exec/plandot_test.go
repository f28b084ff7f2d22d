package exec_test

import (
	"bytes"
	"flag"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func TestPlanMarshalDOT(t *testing.T) {
	e := newExecutor(t, 2)
	p, err := e.Plan(traceGraph())
	require.NoError(t, err)
	got, err := p.MarshalDOT()
	require.NoError(t, err)

	golden := filepath.Join("testdata", "plan.dot")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test ./exec -run TestPlanMarshalDOT -update to create it")
	assert.Equal(t, string(want), string(got), "DOT differs from %s; rerun with -update if the change is intended", golden)

	s := string(got)
	assert.Contains(t, s, `subgraph "cluster_cpu" {`)
	assert.Contains(t, s, `subgraph "cluster_cpu_s0" {`)
	assert.Contains(t, s, `subgraph "cluster_cpu_s1" {`)
	assert.Equal(t, p.Waits(), strings.Count(s, "style=dashed"), "one dashed edge per event wait")

	again, err := p.MarshalDOT()
	require.NoError(t, err)
	assert.Equal(t, got, again, "output is deterministic")
}

// TestPlanMarshalDOTRenders checks that Graphviz accepts the output; it
// skips where Graphviz is not installed, and fails then when CI is set.
func TestPlanMarshalDOTRenders(t *testing.T) {
	dot, err := osexec.LookPath("dot")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Graphviz dot not on PATH (CI installs it: apt-get install graphviz): %v", err)
		}
		t.Skipf("Graphviz dot not on PATH: rendering not checked (apt-get install graphviz): %v", err)
	}
	e := newExecutor(t, 3)
	p, err := e.Plan(traceGraph())
	require.NoError(t, err)
	got, err := p.MarshalDOT()
	require.NoError(t, err)
	cmd := osexec.CommandContext(t.Context(), dot, "-Tsvg")
	cmd.Stdin = bytes.NewReader(got)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	svg, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	assert.Empty(t, stderr.String(), "no Graphviz warnings")
	assert.Contains(t, string(svg), "<svg")
	assert.Contains(t, string(svg), "cpu stream 2")
}
