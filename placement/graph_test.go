package placement_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/bench"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/placement"
	"github.com/streamdag/streamdag/topology"
)

func nop(context.Context, dag.Launch) error { return nil }

// machine returns an embedded machine's topology and its GPUs.
func machine(t *testing.T, name string) (*topology.Topology, []topology.DeviceID) {
	t.Helper()
	topo, ids, err := bench.MachineGPUs(name)
	require.NoError(t, err)
	return topo, ids
}

// HEFT (with its local search) stays within 5% of the exhaustive optimum
// of the same cost model on
// small random DAGs on average, and never beats it.
func TestHEFTNearOptimal(t *testing.T) {
	for _, name := range []string{"dgx1-v100", "rtx5090-2gpu-no-p2p"} {
		topo, ids := machine(t, name)
		var ratio float64
		const dags = 10
		for seed := range uint64(dags) {
			g := bench.RandomPlacementDAG(rand.New(rand.NewPCG(seed, seed)), 6)
			require.NoError(t, g.Validate())
			p := placement.Problem{Graph: g, Devices: ids, Topology: topo}
			h, err := placement.Place(p, placement.HEFT)
			require.NoError(t, err)
			o, err := placement.Optimal(p)
			require.NoError(t, err)
			require.LessOrEqual(t, o.Makespan, h.Makespan, "seed %d", seed)
			ratio += float64(h.Makespan) / float64(o.Makespan)
		}
		t.Logf("%s: HEFT / optimum makespan = %.3f on average", name, ratio/dags)
		assert.LessOrEqual(t, ratio/dags, 1.05, name)
	}
}

// Place keeps each kernel to its Runs entry and its pin, and names what
// it cannot place.
func TestPlaceRunsPinsAndErrors(t *testing.T) {
	topo, ids := machine(t, "dgx1-v100")
	g := dag.New()
	for i := range 8 {
		g.AddKernel(fmt.Sprint("k", i), nop, dag.Estimate(time.Millisecond))
	}
	g.AddKernel("pinned", nop, dag.OnDevice(ids[5]))
	require.NoError(t, g.Validate())
	runs := make([][]int, g.NumKernels())
	for k := range 8 {
		runs[k] = []int{2, 3}
	}
	for _, s := range []placement.Strategy{placement.HEFT, placement.RoundRobin, placement.LeastLoaded} {
		res, err := placement.Place(placement.Problem{Graph: g, Devices: ids, Topology: topo, Runs: runs}, s)
		require.NoError(t, err, s)
		assert.Equal(t, s, res.Strategy)
		for k := range 8 {
			assert.Contains(t, []int{2, 3}, res.Device[k], "%s: kernel %d", s, k)
		}
		assert.Equal(t, 5, res.Device[8], s)
		if s != placement.RoundRobin {
			assert.Equal(t, 4*time.Millisecond, res.Makespan, "%s: 8 kernels of 1 ms on two devices of one lane", s)
		}
	}

	bad := func(p placement.Problem, s placement.Strategy, want string) {
		t.Helper()
		_, err := placement.Place(p, s)
		assert.EqualError(t, err, want)
	}
	p := placement.Problem{Graph: g, Devices: ids}
	bad(p, placement.MemoryBased, "placement: strategy memory-based does not place graphs (heft, round-robin or least-loaded)")
	bad(placement.Problem{Graph: g}, placement.HEFT, "placement: 0 devices with lanes []")
	bad(placement.Problem{Graph: g, Devices: ids[:1], Lanes: []int{0}}, placement.HEFT, "placement: 1 devices with lanes [0]")
	bad(placement.Problem{Graph: g, Devices: ids, Runs: runs[:2]}, placement.HEFT, "placement: runs for 2 kernels, the graph has 9")
	bad(placement.Problem{Graph: g, Devices: ids[:5]}, placement.HEFT,
		"placement: kernel \"pinned\" is pinned to gpu5, which is not among the devices [gpu0 gpu1 gpu2 gpu3 gpu4]")
	runs[8] = []int{1}
	bad(placement.Problem{Graph: g, Devices: ids, Runs: runs}, placement.HEFT, "placement: kernel \"pinned\" is pinned to gpu5, which cannot run it")
	runs[0] = []int{8}
	bad(placement.Problem{Graph: g, Devices: ids, Runs: runs}, placement.HEFT, "placement: kernel \"k0\" runs on devices [8] of 8")
	g.AddKernel("new", nop)
	bad(p, placement.HEFT, "placement: the graph is not validated")
	_, err := placement.Optimal(placement.Problem{Graph: bench.RandomPlacementDAG(rand.New(rand.NewPCG(1, 1)), 13), Devices: ids})
	assert.EqualError(t, err, "placement: optimal placement of 13 kernels: at most 12")
}

// Spread keeps to the devices that run a kernel and counts its own moves.
func TestSpreadRuns(t *testing.T) {
	g := topology.GPU
	targets := []placement.Target{{ID: g(2), Kernels: 0}, {ID: g(1), Kernels: 1}, {ID: g(0), Kernels: 5}}
	moves, orphaned := placement.Spread(g(0), []string{"c", "a", "b", "only1", "none"}, targets, 0, nil,
		func(k string, to topology.DeviceID) bool {
			switch k {
			case "only1":
				return to == g(1)
			case "none":
				return false
			}
			return true
		})
	assert.Equal(t, []placement.MigrationPlan{
		{Kernel: "a", Source: g(0), Target: g(2)},     // gpu1 holds 1, gpu2 none
		{Kernel: "b", Source: g(0), Target: g(1)},     // 1 each: the lower ID
		{Kernel: "c", Source: g(0), Target: g(2)},     // gpu1 2, gpu2 1
		{Kernel: "only1", Source: g(0), Target: g(1)}, // runs only there
	}, moves, "sorted kernels; the source is never a target")
	assert.Equal(t, []string{"none"}, orphaned)
	assert.Equal(t, 5, targets[2].Kernels, "Spread changes none of its arguments")
	moves, orphaned = placement.Spread(g(0), []string{"d", "c", "b", "a"}, targets, 2, nil, nil)
	assert.Equal(t, []placement.MigrationPlan{{Kernel: "a", Source: g(0), Target: g(2)}, {Kernel: "b", Source: g(0), Target: g(1)},
		{Kernel: "c", Source: g(0), Target: g(2)}}, moves)
	assert.Equal(t, []string{"d"}, orphaned, "limit 2: both targets full")
}
