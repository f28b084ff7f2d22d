package exec

import (
	"fmt"
	"slices"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/placement"
	"github.com/streamdag/streamdag/topology"
)

// Placement is how a multi-device executor chooses each kernel's device
// (WithPlacement): one of the graph strategies of package placement.
type Placement uint8

const (
	// PlaceHEFT is placement.HEFT: list scheduling by upward rank with
	// earliest finish time, improved by local search. The default.
	PlaceHEFT Placement = iota
	// PlaceRoundRobin is placement.RoundRobin (a baseline).
	PlaceRoundRobin
	// PlaceLeastLoaded is placement.LeastLoaded: the device with the
	// least estimated compute so far, ignoring transfers (a baseline).
	PlaceLeastLoaded
)

// strategy returns the placement strategy p stands for; a value that is
// none of the constants stands for placement.HEFT.
func (p Placement) strategy() placement.Strategy {
	switch p {
	case PlaceRoundRobin:
		return placement.RoundRobin
	case PlaceLeastLoaded:
		return placement.LeastLoaded
	}
	return placement.HEFT
}

// String returns "heft", "round-robin" or "least-loaded" (the strategy's
// name), or "placement(N)" for a value that is none of the constants.
func (p Placement) String() string {
	if p > PlaceLeastLoaded {
		return fmt.Sprintf("placement(%d)", p)
	}
	return p.strategy().String()
}

// place chooses a device for every kernel of the validated graph g among
// devs (lanes[d] lanes each) with strategy, by placement.Place, where
// device d runs kernel code of kind code[d] only: a kernel goes only to a
// device that runs code it has, and a kernel that reads or writes a value
// buffer not to a code device (mem[d]), nor one whose variant of that
// device's kind binds a buffer at an offset that is not a multiple of the
// device's argument alignment (align[d]). A kernel with code for a code
// device and no estimate, pin or preference goes only to code devices
// that run its code: with nothing to weigh, device code runs where its
// author wrote it for. Errors: a kernel no device has code for, one that
// can run only where it cannot bind its buffers, one pinned to a device
// not in devs or without code for it; placement.Place's.
func place(g *dag.Graph, devs []topology.DeviceID, code []dag.CodeKind, mem []bool, align []int64, lanes []int, topo *topology.Topology, strategy Placement) (placement.Assignment, error) {
	runs, err := runsOn(g, devs, code, mem, align)
	if err != nil {
		return placement.Assignment{}, err
	}
	return placement.Place(placement.Problem{Graph: g, Devices: devs, Lanes: lanes, Topology: topo, Runs: runs}, strategy.strategy())
}

// runsOn returns, by kernel id, the devices (indices into devs) that can
// run the kernel, nil where every device can (see place for the rules);
// nil when every device can run every kernel. Errors name the kernel, in
// kernel id order.
func runsOn(g *dag.Graph, devs []topology.DeviceID, code []dag.CodeKind, mem []bool, align []int64) ([][]int, error) {
	runs := make([][]int, g.NumKernels())
	all := make([]int, len(devs))
	for d := range all {
		all[d] = d
	}
	every := func(cs []int) []int {
		if cs == nil {
			return all
		}
		return cs
	}
	codeDevs := slices.Contains(mem, true)
	for _, k := range g.Kernels() {
		var all bool
		if runs[k.ID], all = codeDevices(k, code); !all && runs[k.ID] == nil {
			return nil, noCodeError(k, devs, code)
		}
		if codeDevs {
			if _, ok := valueAccess(g, k); ok {
				runs[k.ID] = slices.DeleteFunc(slices.Clone(every(runs[k.ID])), func(d int) bool { return mem[d] })
				if len(runs[k.ID]) == 0 {
					return nil, fmt.Errorf("exec: kernel %q reads or writes a value buffer and has code only for code devices", k.Name)
				}
			}
			cs := every(runs[k.ID])
			bad := func(d int) bool { return misaligned(g, k, code[d], align[d]) != nil }
			if slices.ContainsFunc(cs, bad) {
				runs[k.ID] = slices.DeleteFunc(slices.Clone(cs), bad)
				if len(runs[k.ID]) == 0 {
					return nil, fmt.Errorf("exec: kernel %q binds buffers at offsets no device of its code can bind", k.Name)
				}
			}
		}
		if codeDevs && k.Estimate == 0 && k.Device == nil && k.Prefer == nil {
			// Device code where its author expects it: with no estimate
			// to weigh, a kernel with code for a code device runs on one.
			cs := every(runs[k.ID])
			if acc := slices.DeleteFunc(slices.Clone(cs), func(d int) bool { return !mem[d] }); len(acc) > 0 && len(acc) < len(cs) {
				runs[k.ID] = acc
			}
		}
		if k.Device != nil {
			pin := slices.Index(devs, *k.Device)
			if pin < 0 {
				return nil, fmt.Errorf("exec: kernel %q is pinned to %s, which is not among the executor's devices %v", k.Name, *k.Device, devs)
			}
			if c := runs[k.ID]; c != nil && !slices.Contains(c, pin) {
				return nil, fmt.Errorf("exec: kernel %q is pinned to %s, which runs %s code, and the kernel has %s code", k.Name, *k.Device,
					code[pin], k.Codes())
			}
		}
	}
	if !slices.ContainsFunc(runs, func(r []int) bool { return r != nil }) {
		return nil, nil
	}
	return runs, nil
}
