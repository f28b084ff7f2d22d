package failgraph_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/topo"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/failgraph"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// graphScenario builds a small error graph: load fails writing raw; filter
// (raw → clean) and agg (clean → out) are skipped; sort fails writing side
// with a two-line error; the reservation of scratch fails.
func graphScenario(t *testing.T) *failgraph.Store {
	t.Helper()
	name := map[buffers.ID]string{0: "raw", 1: "clean", 2: "out", 3: "side", 4: "scratch", 5: "ok"}
	s := failgraph.New(func(id buffers.ID) string { return name[id] })
	load := s.Fail("load", errors.New("short read"), bs(bind(0, 0, 4096)))
	for _, k := range []struct {
		kernel  string
		in, out buffers.ID
	}{{"filter", 0, 1}, {"agg", 1, 2}} {
		id, skip := s.SkipIfTainted(k.kernel, bs(bind(5, 0, 8), bind(k.in, 0, 4096)), bs(bind(k.out, 0, 4096)))
		require.True(t, skip)
		require.Equal(t, load, id)
	}
	require.NotZero(t, s.Fail("sort", errors.New("out of memory\nwhile sorting 3 runs"), bs(bind(3, 0, 64))))
	require.NotZero(t, s.FailUnallocated("prep", 4, errors.New("over budget")))
	return s
}

func TestGraph(t *testing.T) {
	s := graphScenario(t)
	g := s.Graph()

	kinds := map[string]failgraph.NodeKind{}
	labels := map[string]string{}
	owner := map[string]failgraph.FailureID{}
	for _, n := range graph.NodesOf(g.Nodes()) {
		fn, ok := n.(*failgraph.Node)
		require.True(t, ok, "node %T", n)
		require.NotContains(t, kinds, fn.DOTID(), "duplicate node")
		kinds[fn.DOTID()] = fn.Kind
		labels[fn.DOTID()] = fn.Label
		owner[fn.DOTID()] = fn.Failure
	}
	assert.Equal(t, map[string]failgraph.NodeKind{
		"failure #1": failgraph.NodeFailure, "failure #2": failgraph.NodeFailure, "failure #3": failgraph.NodeFailure,
		"kernel filter": failgraph.NodeSkip, "kernel agg": failgraph.NodeSkip,
		"buffer raw": failgraph.NodeBuffer, "buffer clean": failgraph.NodeBuffer, "buffer out": failgraph.NodeBuffer,
		"buffer side": failgraph.NodeBuffer, "buffer scratch": failgraph.NodeBuffer,
	}, kinds, "the clean buffer ok is not in the graph")
	assert.Equal(t, "#1 load: short read", labels["failure #1"])
	assert.Equal(t, "#2 sort: out of memory", labels["failure #2"], "first line of the error")
	assert.Equal(t, "#3 prep: over budget", labels["failure #3"])
	assert.Equal(t, failgraph.FailureID(1), owner["kernel agg"])
	assert.Equal(t, failgraph.FailureID(3), owner["buffer scratch"])

	var edges []string
	for _, u := range graph.NodesOf(g.Nodes()) {
		for _, v := range graph.NodesOf(g.From(u.ID())) {
			edges = append(edges, u.(*failgraph.Node).DOTID()+" -> "+v.(*failgraph.Node).DOTID())
		}
	}
	slices.Sort(edges)
	assert.Equal(t, []string{
		"buffer clean -> kernel agg",
		"buffer raw -> kernel filter",
		"failure #1 -> buffer clean",
		"failure #1 -> buffer out",
		"failure #1 -> buffer raw",
		"failure #2 -> buffer side",
		"failure #3 -> buffer scratch",
		"kernel agg -> buffer out",
		"kernel filter -> buffer clean",
	}, edges)
	_, err := topo.Sort(g)
	assert.NoError(t, err, "the error graph is acyclic")

	// Graph is a snapshot.
	s.Written(bs(bind(0, 0, 4096), bind(1, 0, 4096), bind(2, 0, 4096), bind(3, 0, 64)))
	s.Allocated(4)
	require.True(t, s.Empty())
	assert.Equal(t, 10, g.Nodes().Len())
	assert.Zero(t, s.Graph().Nodes().Len())
}

func TestMarshalDOT(t *testing.T) {
	got, err := graphScenario(t).MarshalDOT()
	require.NoError(t, err)
	golden := filepath.Join("testdata", "errors.dot")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test -update to create it")
	assert.Equal(t, string(want), string(got))

	empty, err := failgraph.New(nil).MarshalDOT()
	require.NoError(t, err)
	assert.Equal(t, "strict digraph errors {\n}", string(empty))
}
