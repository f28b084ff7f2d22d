package bench_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/bench"
	"github.com/streamdag/streamdag/placement"
	"github.com/streamdag/streamdag/topology"
)

// TestPlacementQuality measures placement by the cost model (not by
// time): on seeded random DAGs over every embedded machine, HEFT's modeled
// makespan against the exhaustive optimum for small DAGs, and HEFT's
// makespan and transfer cost against round-robin and least-loaded
// placement for larger DAGs (mean of 3 DAGs each). Run with -v to see
// the table; -placement.full solves 8-kernel DAGs exactly and uses
// 200-kernel DAGs (a few minutes).
func TestPlacementQuality(t *testing.T) {
	small, smallDAGs, large := 6, 8, 60
	if *fullPlacement {
		small, large = 8, 200
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n| machine | GPUs | HEFT / optimum makespan (%d DAGs of %d kernels) | makespan: round-robin / HEFT | least-loaded / HEFT | modeled transfer ms (%d-kernel DAGs): HEFT | round-robin | least-loaded |\n|---|---|---|---|---|---|---|---|\n", smallDAGs, small, large)
	for _, name := range topology.Machines() {
		topo, ids, err := bench.MachineGPUs(name)
		require.NoError(t, err)
		var opt float64
		for seed := range uint64(smallDAGs) {
			g := bench.RandomPlacementDAG(rand.New(rand.NewPCG(seed, 7)), small)
			require.NoError(t, g.Validate())
			pr := placement.Problem{Graph: g, Devices: ids, Topology: topo}
			h, err := placement.Place(pr, placement.HEFT)
			require.NoError(t, err)
			o, err := placement.Optimal(pr)
			require.NoError(t, err)
			require.LessOrEqual(t, o.Makespan, h.Makespan)
			opt += float64(h.Makespan) / float64(o.Makespan)
		}
		opt /= float64(smallDAGs)
		assert.LessOrEqual(t, opt, 1.05, "%s: HEFT within 5%% of the optimum on average", name)

		var rrM, llM, hT, rrT, llT float64
		const largeDAGs = 3
		for seed := range uint64(largeDAGs) {
			g := bench.RandomPlacementDAG(rand.New(rand.NewPCG(seed, 200)), large)
			require.NoError(t, g.Validate())
			pr := placement.Problem{Graph: g, Devices: ids, Lanes: slices.Repeat([]int{2}, len(ids)), Topology: topo}
			res := map[placement.Strategy]placement.Assignment{}
			for _, s := range []placement.Strategy{placement.HEFT, placement.RoundRobin, placement.LeastLoaded} {
				res[s], err = placement.Place(pr, s)
				require.NoError(t, err)
			}
			h := res[placement.HEFT]
			rrM += float64(res[placement.RoundRobin].Makespan) / float64(h.Makespan)
			llM += float64(res[placement.LeastLoaded].Makespan) / float64(h.Makespan)
			hT += h.Transfer.Seconds() * 1e3
			rrT += res[placement.RoundRobin].Transfer.Seconds() * 1e3
			llT += res[placement.LeastLoaded].Transfer.Seconds() * 1e3
		}
		fmt.Fprintf(&table, "| %s | %d | %.3f | %.2f | %.2f | %.1f | %.1f | %.1f |\n", name, len(ids), opt,
			rrM/largeDAGs, llM/largeDAGs, hT/largeDAGs, rrT/largeDAGs, llT/largeDAGs)
	}
	t.Log(table.String())
}

var fullPlacement = flag.Bool("placement.full", false, "TestPlacementQuality: 8-kernel exact DAGs and 200-kernel DAGs (slower)")
