package exec_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/topology"
)

// Each device has its own stream count: a plan over a CPU device with 2
// streams and a simulated GPU with 4 uses every stream of each within its
// count, its global streams are the devices' streams in order, and the
// answer is the CPU device's.
func TestPerDeviceStreamCounts(t *testing.T) {
	const seed = 21
	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, dev.Close()) })
	set, err := sim.New([]topology.DeviceFacts{{ID: topology.GPU(0)}}, sim.WithStreams(4))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	e, err := exec.NewMulti([]gpu.Device{dev, set.Devices()[0]}, nil,
		exec.WithAllocator(leaktest.Allocator(t)), exec.WithPlacement(exec.PlaceRoundRobin))
	require.NoError(t, err, "devices with different stream counts")

	g, total, want := mixedGraph(seed, 16)
	p, err := e.Plan(g)
	require.NoError(t, err, "seed %d", seed)
	assert.Equal(t, []int{2, 4}, p.Streams())
	assert.Equal(t, 2, p.NumStreams(0))
	assert.Equal(t, 4, p.NumStreams(1))
	require.Equal(t, 6, p.NumGlobalStreams())
	used := map[[2]int]bool{}
	for i, l := range p.Launches() {
		require.Less(t, l.Stream, p.NumStreams(l.Device), "seed %d: launch %q", seed, l.Name)
		d, s := p.StreamOf(p.GlobalStream(i))
		assert.Equal(t, [2]int{l.Device, l.Stream}, [2]int{d, s}, "seed %d: launch %q", seed, l.Name)
		used[[2]int{l.Device, l.Stream}] = true
		for _, w := range l.Waits {
			require.Less(t, w.Stream, p.NumGlobalStreams())
		}
	}
	assert.True(t, used[[2]int{1, 3}], "seed %d: the GPU's fourth stream holds launches: %v", seed, used)
	assert.Contains(t, p.String(), "cpu × 2, gpu0 × 4")

	res, err := e.Execute(t.Context(), p)
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, res.Err())
	assert.Equal(t, want, uint64Of(t, res, total), "seed %d", seed)
	assert.Equal(t, []int{2, 4}, res.Report.Streams)
}
