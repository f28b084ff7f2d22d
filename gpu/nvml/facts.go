package nvml

import (
	"slices"

	"github.com/streamdag/streamdag/topology"
)

// Facts returns what the inventory knows as topology facts, for
// topology.New: the host, the GPUs, and for every ordered pair of GPUs the
// link kind (NV# from NVLink, counted or estimated as P2PPair.NVLinks
// says, else the PCIe common ancestor) and the P2P status of each
// capability. Pairs NVML could not describe stay unknown
// (topology.LinkNone, P2P not reported). Pairs is nil when there are no
// GPUs or no pair was read.
func (inv Inventory) Facts() topology.Facts {
	f := topology.Facts{GPUs: inv.GPUs()}
	if len(inv.Devices) > 0 {
		f.Host = inv.Devices[0]
	}
	if len(f.GPUs) == 0 || len(inv.P2P) == 0 {
		return f
	}
	f.Pairs = make([][]topology.Pair, len(f.GPUs))
	for i := range f.Pairs {
		f.Pairs[i] = make([]topology.Pair, len(f.GPUs))
	}
	index := func(id topology.DeviceID) int {
		return slices.IndexFunc(f.GPUs, func(d topology.DeviceFacts) bool { return d.ID == id })
	}
	for _, p := range inv.P2P {
		i, j := index(p.From), index(p.To)
		if i < 0 || j < 0 {
			continue
		}
		var pair topology.Pair
		if kind, n, err := topology.ParseLinkLabel(p.Label()); err == nil {
			pair.Kind, pair.NVLinks = kind, n
		}
		pair.P2P = topology.P2P{Read: p.Read, Write: p.Write, NVLink: p.NVLink, Atomics: p.Atomics}
		f.Pairs[i][j] = pair
	}
	return f
}
