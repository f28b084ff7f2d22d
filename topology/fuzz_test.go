package topology_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/topology"
)

// Seeds beyond these are in testdata/fuzz/<FuzzName>/: every example of
// shared/topologies, copied.

// FuzzParseMatrix checks that ParseMatrix never panics, that every error
// is a *ParseError naming a place inside the text, and that what it
// accepts builds a Topology whose routes all work.
func FuzzParseMatrix(f *testing.F) {
	for _, s := range []string{
		"\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tNV2\t0-3\t0\t\tN/A\nGPU1\tNV2\t X \t0-3\t0\t\tN/A\n",
		"  GPU0 GPU1 NIC0 CPU Affinity\nGPU0 X SOC PIX 1-1\nGPU1 SOC X PHB 1-1\nNIC0 PIX PHB X\n\nNIC Legend:\n\n  NIC0: mlx5_0\n",
		"\t    GPU0GPU1mlx5_0\tCPU Affinity\nGPU0\t X \tPXB\tPIX\t0\nGPU1\tPXB\t X \tSYS\t0\nmlx5_0\tPIX\tSYS\t X \n",
		"\tGPU0\nGPU0\tNV0\n", "", "GPU0", "\tGPU0\tGPU0\n", "\ufeff\tGPU0\nGPU0\tX\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		facts, err := topology.ParseMatrix(strings.NewReader(s))
		if err != nil {
			var pe *topology.ParseError
			require.ErrorAs(t, err, &pe)
			assert.GreaterOrEqual(t, pe.Line, 0)
			assert.LessOrEqual(t, pe.Line, strings.Count(s, "\n")+1)
			assert.GreaterOrEqual(t, pe.Col, 0)
			assert.NotEmpty(t, err.Error())
			return
		}
		require.NotEmpty(t, facts.GPUs)
		topo, err := topology.New(facts)
		require.NoError(t, err, "parsed facts must be valid")
		for _, a := range topo.Devices() {
			for _, b := range topo.Devices() {
				r, err := topo.Route(1<<20, a.ID, b.ID)
				require.NoError(t, err)
				assert.GreaterOrEqual(t, r.Cost, r.Latency())
			}
		}
	})
}

// FuzzParseP2P checks that ParseP2P never panics, that errors are
// *ParseError, and that an accepted matrix is square and applies to the
// facts of the same GPUs.
func FuzzParseP2P(f *testing.F) {
	for _, s := range []string{
		"\tGPU0\tGPU1\n GPU0\tX\tGNS\n GPU1\tGNS\tX\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n",
		"     GPU0  GPU1  GPU2\nGPU0  X  OK  NS\nGPU1  OK  X  TNS\nGPU2  CNS  U  X\n",
		"\tGPU0\nGPU0\tOK\n", "\tGPU0\tNIC0\n", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := topology.ParseP2P(strings.NewReader(s))
		if err != nil {
			var pe *topology.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			assert.GreaterOrEqual(t, pe.Line, 0)
			assert.LessOrEqual(t, pe.Line, strings.Count(s, "\n")+1)
			return
		}
		require.Len(t, m.Status, len(m.GPUs))
		facts := topology.Facts{}
		for i, id := range m.GPUs {
			require.Len(t, m.Status[i], len(m.GPUs))
			facts.GPUs = append(facts.GPUs, topology.DeviceFacts{ID: id, NUMANode: -1})
		}
		require.NoError(t, facts.ApplyP2P(m, topology.P2PRead))
		_, err = topology.New(facts)
		require.NoError(t, err)
	})
}

// FuzzParseJSON checks that ParseJSON never panics and that accepted
// descriptions build a Topology.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{
		`{"gpus":2,"gpu":"V100","matrix":[["X","NV2"],["NV2","X"]],"numa":[0,null],"cpu_affinity":["0-3",null],"p2p":{"mode":"rw","matrix":[["X","OK"],["NS","X"]]}}`,
		`{"matrix":[["X"]]}`, `{`, `[]`, `{"matrix":[["X","SYS"],["PHB","X"]]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		facts, err := topology.ParseJSON(strings.NewReader(s))
		if err != nil {
			var pe *topology.ParseError
			require.ErrorAs(t, err, &pe)
			return
		}
		_, err = topology.New(facts)
		require.NoError(t, err)
	})
}
