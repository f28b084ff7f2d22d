package bench_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/bench"
	"github.com/streamdag/streamdag/exec"
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
		m, err := topology.LoadMachine(name)
		require.NoError(t, err)
		topo, err := topology.New(m.Facts, topology.WithGPUSpec(m.Spec))
		require.NoError(t, err)
		var ids []topology.DeviceID
		for _, d := range topo.GPUs() {
			ids = append(ids, d.ID)
		}
		var opt float64
		for seed := range uint64(smallDAGs) {
			g := bench.RandomPlacementDAG(rand.New(rand.NewPCG(seed, 7)), small)
			require.NoError(t, g.Validate())
			h, err := exec.Place(g, ids, 1, topo, exec.PlaceHEFT)
			require.NoError(t, err)
			o, err := exec.OptimalPlacement(g, ids, 1, topo)
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
			res := map[exec.Placement]exec.PlacementResult{}
			for _, s := range []exec.Placement{exec.PlaceHEFT, exec.PlaceRoundRobin, exec.PlaceLeastLoaded} {
				res[s], err = exec.Place(g, ids, 2, topo, s)
				require.NoError(t, err)
			}
			h := res[exec.PlaceHEFT]
			rrM += float64(res[exec.PlaceRoundRobin].Makespan) / float64(h.Makespan)
			llM += float64(res[exec.PlaceLeastLoaded].Makespan) / float64(h.Makespan)
			hT += h.Transfer.Seconds() * 1e3
			rrT += res[exec.PlaceRoundRobin].Transfer.Seconds() * 1e3
			llT += res[exec.PlaceLeastLoaded].Transfer.Seconds() * 1e3
		}
		fmt.Fprintf(&table, "| %s | %d | %.3f | %.2f | %.2f | %.1f | %.1f | %.1f |\n", name, len(ids), opt,
			rrM/largeDAGs, llM/largeDAGs, hT/largeDAGs, rrT/largeDAGs, llT/largeDAGs)
	}
	t.Log(table.String())
}

var fullPlacement = flag.Bool("placement.full", false, "TestPlacementQuality: 8-kernel exact DAGs and 200-kernel DAGs (slower)")
