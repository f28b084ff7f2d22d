package dag_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/graph/encoding/dot"
	"gonum.org/v1/gonum/graph/simple"

	"github.com/streamdag/streamdag/dag"
)

// flightsLike is a small pipeline in the shape of the flights example: two
// sources scan halves of one input file, two filters keep delayed flights,
// and a merge summarises both.
func flightsLike() *dag.Graph {
	g := dag.New()
	file := g.AddBuffer("flights.parquet", 4096, dag.Input())
	b24 := dag.AddValue[any](g, "batch_2024").ID()
	b25 := dag.AddValue[any](g, "batch_2025").ID()
	d24 := dag.AddValue[any](g, "delayed_2024").ID()
	d25 := dag.AddValue[any](g, "delayed_2025").ID()
	sum := g.AddBuffer("summary", 64)
	g.AddKernel("scan_2024", nop, dag.ReadsRange(file, 0, 2048), dag.Writes(b24))
	g.AddKernel("scan_2025", nop, dag.ReadsRange(file, 2048, 2048), dag.Writes(b25))
	g.AddKernel("filter_2024", nop, dag.Reads(b24), dag.Writes(d24))
	g.AddKernel("filter_2025", nop, dag.Reads(b25), dag.Writes(d25))
	g.AddKernel("merge", nop, dag.Reads(d24, d25), dag.Writes(sum))
	return g
}

func TestMarshalDOT(t *testing.T) {
	g := flightsLike()
	require.NoError(t, g.Validate())
	got, err := g.MarshalDOT("flights_like")
	require.NoError(t, err)

	golden := filepath.Join("testdata", "flights_like.dot")
	if *update {
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test ./dag -run TestMarshalDOT -update to create it")
	assert.Equal(t, string(want), string(got), "DOT differs from %s; rerun with -update if the change is intended", golden)

	again, err := flightsLike().MarshalDOT("flights_like")
	require.NoError(t, err)
	assert.Equal(t, got, again, "output is deterministic")
}

func TestMarshalDOTParses(t *testing.T) {
	got, err := flightsLike().MarshalDOT("flights_like")
	require.NoError(t, err)

	parsed := simple.NewDirectedGraph()
	require.NoError(t, dot.Unmarshal(got, parsed))
	assert.Equal(t, 11, parsed.Nodes().Len(), "6 buffers and 5 kernels")
	assert.Equal(t, 11, parsed.Edges().Len(), "6 reads and 5 writes")
}

func TestMarshalDOTEscapesNames(t *testing.T) {
	g := dag.New()
	x := g.AddBuffer(`say "hi"`, 8, dag.Input())
	v := dag.AddValue[any](g, `C:\tmp`).ID()
	n := dag.AddValue[any](g, "two\nlines").ID()
	g.AddKernel("k", nop, dag.Reads(x), dag.Writes(v, n))
	got, err := g.MarshalDOT("")
	require.NoError(t, err)
	assert.Equal(t, `strict digraph {
  // Node definitions.
  "say \"hi\"" [
    shape=doublecircle
    label="say \"hi\"\n8 B"
  ];
  "C:\\tmp" [
    shape=ellipse
    label="C:\\tmp"
  ];
  "two\nlines" [
    shape=ellipse
    label="two\nlines"
  ];
  k [shape=box];

  // Edge definitions.
  "say \"hi\"" -> k;
  k -> "C:\\tmp";
  k -> "two\nlines";
}`, string(got))

	parsed := simple.NewDirectedGraph()
	require.NoError(t, dot.Unmarshal(got, parsed))
	assert.Equal(t, 4, parsed.Nodes().Len())
}
