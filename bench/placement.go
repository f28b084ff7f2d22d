package bench

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/topology"
)

// MachineGPUs returns the topology of the embedded machine name
// (topology.LoadMachine, with the machine's GPU spec) and its GPUs' IDs in
// order, the devices placement benchmarks place on. Errors: an unknown
// machine, a topology that does not build.
func MachineGPUs(name string) (*topology.Topology, []topology.DeviceID, error) {
	m, err := topology.LoadMachine(name)
	if err != nil {
		return nil, nil, err
	}
	topo, err := topology.New(m.Facts, topology.WithGPUSpec(m.Spec))
	if err != nil {
		return nil, nil, err
	}
	var ids []topology.DeviceID
	for _, d := range topo.GPUs() {
		ids = append(ids, d.ID)
	}
	return topo, ids, nil
}

// RandomPlacementDAG is a seeded random DAG of n kernels for placement
// benchmarks: compute estimates of 0.1–2 ms, raw output buffers of
// 1–512 MiB, each kernel reading each earlier output with probability 1/3.
func RandomPlacementDAG(rng *rand.Rand, n int) *dag.Graph {
	g := dag.New()
	out := make([]dag.BufferID, n)
	for i := range n {
		out[i] = g.AddBuffer(fmt.Sprint("b", i), int64(1+rng.IntN(512))<<20)
		opts := []dag.KernelOption{dag.Writes(out[i]), dag.Estimate(time.Duration(100+rng.IntN(1900)) * time.Microsecond)}
		for j := range i {
			if rng.IntN(3) == 0 {
				opts = append(opts, dag.Reads(out[j]))
			}
		}
		g.AddKernel(fmt.Sprint("k", i), Empty, opts...)
	}
	return g
}
