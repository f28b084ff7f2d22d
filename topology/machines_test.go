package topology_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/topology"
)

func TestMachines(t *testing.T) {
	names := topology.Machines()
	assert.Contains(t, names, "dgx1-v100")
	assert.Contains(t, names, "rtx5090-2gpu-no-p2p")
	for _, n := range names {
		m, err := topology.LoadMachine(n)
		require.NoError(t, err, n)
		assert.NotEmpty(t, m.Facts.GPUs, n)
		topo, err := topology.New(m.Facts, topology.WithGPUSpec(m.Spec))
		require.NoError(t, err, n)
		assert.Len(t, topo.GPUs(), len(m.Facts.GPUs))
	}
	m, err := topology.LoadMachine("dgx1-v100")
	require.NoError(t, err)
	assert.Equal(t, "V100", m.Spec.Name)
	assert.True(t, m.SpecFound)
	assert.Equal(t, int64(16)<<30, m.MemoryBytes)
	assert.Len(t, m.Facts.GPUs, 8)

	_, err = topology.LoadMachine("nosuch")
	assert.ErrorContains(t, err, `no machine "nosuch" (known: `)
}

// A machine's JSON file reads as its embedded copy does: same facts, GPU
// model and memory, from the description.
func TestParseMachineMatchesEmbedded(t *testing.T) {
	dir := testdata.Topologies(t)
	for _, name := range topology.Machines() {
		b, err := os.ReadFile(filepath.Join(dir, name+".json"))
		if err != nil {
			t.Logf("%s: no shared JSON twin: %v", name, err)
			continue
		}
		got, err := topology.ParseMachine(b)
		require.NoError(t, err, name)
		want, err := topology.LoadMachine(name)
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
	}
	_, err := topology.ParseMachine([]byte(`{"gpus": 2, "matrix": [["X"]]}`))
	assert.Error(t, err)
}
