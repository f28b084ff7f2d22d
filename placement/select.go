package placement

import (
	"slices"
	"time"

	"github.com/streamdag/streamdag/topology"
)

// never is the cost of a transfer the topology cannot price: never
// preferred.
const never = time.Duration(1<<63 - 1)

// choose applies a built-in strategy (any but Custom; HEFT and unknown
// values act as LeastLoaded) to a non-empty candidate list in ID order;
// rr is the round-robin counter, advanced by RoundRobin. Time:
// O(candidates × inputs).
func choose(s Strategy, cands []DeviceStatus, req SelectRequest, topo *topology.Topology, rr *uint64) topology.DeviceID {
	best := func(better func(a, b DeviceStatus) bool) topology.DeviceID {
		b := cands[0]
		for _, s := range cands[1:] {
			if better(s, b) {
				b = s
			}
		}
		return b.Info.ID
	}
	leastLoaded := func(a, b DeviceStatus) bool { return len(a.Kernels) < len(b.Kernels) }
	switch s {
	case FirstAvailable:
		return cands[0].Info.ID
	case RoundRobin:
		i := *rr % uint64(len(cands))
		*rr++
		return cands[i].Info.ID
	case MemoryBased:
		return best(func(a, b DeviceStatus) bool { return a.Info.FreeMemoryBytes > b.Info.FreeMemoryBytes })
	case ComputeCapability:
		return best(func(a, b DeviceStatus) bool {
			ca, cb := a.Info.ComputeCapability, b.Info.ComputeCapability
			return ca.Major > cb.Major || (ca.Major == cb.Major && ca.Minor > cb.Minor)
		})
	case TopologyAware:
		if topo == nil || len(req.Inputs) == 0 {
			return best(leastLoaded)
		}
		cost := make(map[topology.DeviceID]time.Duration, len(cands))
		for _, s := range cands {
			var sum time.Duration
			for _, in := range req.Inputs {
				d, err := topo.TransferCost(max(req.InputBytes, 0), in, s.Info.ID)
				if err != nil {
					d = never // not in the topology
				}
				if sum += d; sum < 0 {
					sum = never
				}
			}
			cost[s.Info.ID] = sum
		}
		return best(func(a, b DeviceStatus) bool {
			ca, cb := cost[a.Info.ID], cost[b.Info.ID]
			return ca < cb || (ca == cb && len(a.Kernels) < len(b.Kernels))
		})
	default:
		return best(leastLoaded)
	}
}

// Target is a device Spread may move kernels to, with its load.
type Target struct {
	ID      topology.DeviceID // the device
	Kernels int               // kernels on it now
}

// Spread plans where the kernels (by name) of device from go when it is removed or
// lost: each kernel, in sorted order, goes to the target with the fewest
// kernels counting the ones planned so far (ties: the cheapest transfer
// of 1 MiB from from when topo is not nil, then the lowest ID), among
// the targets other than from that hold fewer than limit kernels (limit
// <= 0: no limit) and on which runs(kernel, target) holds (runs nil:
// every target runs every kernel). A kernel no target takes is orphaned.
// Spread changes none of its arguments and calls runs on the calling
// goroutine. Time: O(kernels × targets) plus the topology's costs.
func Spread(from topology.DeviceID, kernels []string, targets []Target, limit int, topo *topology.Topology,
	runs func(k string, to topology.DeviceID) bool) (moves []MigrationPlan, orphaned []string) {
	ks := slices.Sorted(slices.Values(kernels))
	ts := slices.DeleteFunc(slices.Clone(targets), func(t Target) bool { return t.ID == from })
	slices.SortStableFunc(ts, func(a, b Target) int { return cmpID(a.ID, b.ID) })
	hop := make([]time.Duration, len(ts))
	for i, t := range ts {
		if topo != nil {
			if d, err := topo.TransferCost(1<<20, from, t.ID); err != nil {
				hop[i] = never
			} else {
				hop[i] = d
			}
		}
	}
	for _, k := range ks {
		best := -1
		for i, t := range ts {
			if limit > 0 && t.Kernels >= limit || runs != nil && !runs(k, t.ID) {
				continue
			}
			if best < 0 || t.Kernels < ts[best].Kernels || (t.Kernels == ts[best].Kernels && hop[i] < hop[best]) {
				best = i
			}
		}
		if best < 0 {
			orphaned = append(orphaned, k)
			continue
		}
		ts[best].Kernels++
		moves = append(moves, MigrationPlan{Kernel: k, Source: from, Target: ts[best].ID})
	}
	return moves, orphaned
}
