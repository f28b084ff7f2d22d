package placement

import "fmt"

// Strategy is how the engine chooses a device: for each kernel of a graph
// (Place) or for one new kernel (Coordinator.Select). The zero value is
// LeastLoaded.
type Strategy uint8

const (
	// LeastLoaded picks the candidate with the least load: for Select the
	// fewest kernels, for Place the least estimated compute placed so far
	// (ignoring transfers; a baseline). Ties go to the first candidate:
	// the lowest device ID for Select, the lowest device index for Place.
	LeastLoaded Strategy = iota
	// FirstAvailable picks the first available device in ID order
	// (Select only).
	FirstAvailable
	// RoundRobin deals devices in turn: for Select one step over the
	// available devices per call, for Place kernel i (in upward-rank
	// order) to device i mod the device count when it may run there,
	// else to the (i mod n)-th of the n devices it may run on (a
	// baseline).
	RoundRobin
	// MemoryBased picks the available device with the most free memory;
	// ties go to the lowest ID (Select only).
	MemoryBased
	// ComputeCapability picks the available device with the highest
	// compute capability; ties go to the lowest ID (Select only).
	ComputeCapability
	// TopologyAware picks the available device to which moving
	// SelectRequest.InputBytes from each of SelectRequest.Inputs costs
	// least (topology.Topology.TransferCost); ties go to the less loaded,
	// then the lowest ID. Without a topology or inputs it acts as
	// LeastLoaded (Select only).
	TopologyAware
	// Custom asks the selector of WithSelector (Select only).
	Custom
	// HEFT is list scheduling by upward rank with earliest finish time
	// (HEFT: Topcuoglu, Hariri and Wu, "Performance-effective and
	// low-complexity task scheduling for heterogeneous computing", IEEE
	// TPDS 13(3), 2002; the non-insertion variant), over the cost model
	// of Place (Place only).
	//
	// HEFT is greedy: with transfers that dwarf compute it spreads work
	// that later pays to come back. So its result is then improved by
	// local search over the same model, from HEFT's placement and a few
	// others (every single-device one, round-robin, least-loaded): move
	// one kernel at a time while the makespan drops, and two at a time on
	// graphs of up to 16 kernels. Graphs of more than LocalSearchLimit
	// kernels keep plain HEFT.
	HEFT
)

// String returns the strategy's name: "least-loaded", "first-available",
// "round-robin", "memory-based", "compute-capability", "topology-aware",
// "custom" or "heft"; "strategy(N)" for any other value.
func (s Strategy) String() string {
	switch s {
	case LeastLoaded:
		return "least-loaded"
	case FirstAvailable:
		return "first-available"
	case RoundRobin:
		return "round-robin"
	case MemoryBased:
		return "memory-based"
	case ComputeCapability:
		return "compute-capability"
	case TopologyAware:
		return "topology-aware"
	case Custom:
		return "custom"
	case HEFT:
		return "heft"
	}
	return fmt.Sprintf("strategy(%d)", int(s))
}
