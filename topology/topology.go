package topology

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"gonum.org/v1/gonum/graph/simple"
)

// Topology is the modelled interconnect of one machine: its GPUs, the host
// CPU, one Link per ordered pair of devices, and the best route and
// transfer cost between any two. Build it with New. A Topology is
// immutable: safe for concurrent use by many goroutines.
type Topology struct {
	host    DeviceFacts
	gpus    []DeviceFacts
	pos     map[DeviceID]int
	specs   []GPUSpec
	origins []SpecOrigin
	links   [][]Link // GPU × GPU
	toHost  []Link   // GPU i → cpu
	outHost []Link   // cpu → GPU i
	nics    []NIC
}

// Option configures New. An option that is given bad input returns an
// error, which New returns prefixed with "topology: ".
type Option func(*options) error

type options struct {
	spec *GPUSpec
}

// WithGPUSpec makes every GPU of the topology use spec, whatever its name
// or compute capability say (the CLI's --gpu flag). Its SpecOrigin is
// SpecFromOption. Errors: a spec with no Name, or a negative NVLink
// version, NVLink rate, PCIe generation or lane count.
func WithGPUSpec(spec GPUSpec) Option {
	return func(o *options) error {
		switch {
		case spec.Name == "":
			return errors.New("WithGPUSpec: the spec has no name")
		case spec.NVLinkVersion < 0, spec.NVLinkPerLinkBps < 0, spec.PCIeGen < 0, spec.PCIeLanes < 0:
			return fmt.Errorf("WithGPUSpec: spec %s has a negative NVLink or PCIe figure", spec.Name)
		}
		o.spec = &spec
		return nil
	}
}

// ErrUnknownDevice is wrapped by the errors of Route and TransferCost for
// a device the topology does not hold.
var ErrUnknownDevice = errors.New("topology: unknown device")

// New builds a Topology from facts. Each GPU's spec (NVLink rate, PCIe
// generation) comes from WithGPUSpec when given, else from its compute
// capability, else from its Name, else DefaultSpec; GPUSpec reports which.
//
// The P2P of a pair is as reported in Pair.P2P (see P2P.Usable); when
// nothing was reported it is estimated: NVLink pairs have P2P, PCIe pairs
// up to NODE have it when both GPUs' specs allow PCIe P2P, SYS pairs and
// LinkNone pairs do not. An estimated link has Link.Estimated set.
//
// Errors: a GPU whose ID is not a GPU ID or appears twice; Pairs of the
// wrong shape; a pair of LinkSelf off the diagonal; NV# counts outside
// 1..64 (or set for a non-NVLink kind); kinds that differ between (i,j)
// and (j,i); the first option's error (see WithGPUSpec; nil options are
// skipped).
// New never panics and does not keep facts' slices.
func New(facts Facts, opts ...Option) (*Topology, error) {
	var o options
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("topology: %w", err)
		}
	}
	if err := facts.checkShape(); err != nil {
		return nil, err
	}
	n := len(facts.GPUs)
	t := &Topology{host: facts.Host, pos: make(map[DeviceID]int, n)}
	if t.host.ID != CPU || t.host.Name == "" {
		t.host = DeviceFacts{ID: CPU, Name: "host CPU", NUMANode: -1}
	}
	for i, d := range facts.GPUs {
		if d.ID.Kind != KindGPU || d.ID.Index < 0 {
			return nil, fmt.Errorf("topology: GPUs[%d] has ID %s, not a GPU", i, d.ID)
		}
		if _, dup := t.pos[d.ID]; dup {
			return nil, fmt.Errorf("topology: %s listed twice", d.ID)
		}
		t.pos[d.ID] = i
		d.CPUAffinity = slices.Clone(d.CPUAffinity)
		t.gpus = append(t.gpus, d)
		spec, origin := DefaultSpec, SpecDefault
		switch {
		case o.spec != nil:
			spec, origin = *o.spec, SpecFromOption
		default:
			if s, ok := SpecForComputeCapability(d.ComputeCapability); ok {
				spec, origin = s, SpecFromComputeCapability
			} else if s, ok := SpecByName(d.Name); ok {
				spec, origin = s, SpecFromName
			}
		}
		t.specs = append(t.specs, spec)
		t.origins = append(t.origins, origin)
	}
	pair := func(i, j int) Pair {
		if facts.Pairs == nil {
			return Pair{}
		}
		return facts.Pairs[i][j]
	}
	for i := range n {
		for j := range n {
			if i == j {
				continue
			}
			p, q := pair(i, j), pair(j, i)
			if p.Kind == LinkSelf || p.Kind > LinkSYS {
				return nil, fmt.Errorf("topology: %s→%s has kind %s", t.gpus[i].ID, t.gpus[j].ID, p.Kind)
			}
			if (p.Kind == LinkNVLink) != (p.NVLinks > 0) || p.NVLinks < 0 || p.NVLinks > maxNVLinks {
				return nil, fmt.Errorf("topology: %s→%s has kind %s with %d NVLinks", t.gpus[i].ID, t.gpus[j].ID, p.Kind, p.NVLinks)
			}
			if p.Kind != q.Kind || p.NVLinks != q.NVLinks {
				return nil, fmt.Errorf("topology: %w: %s→%s is %s but %s→%s is %s", ErrAsymmetric, t.gpus[i].ID, t.gpus[j].ID, p.Label(), t.gpus[j].ID, t.gpus[i].ID, q.Label())
			}
		}
	}
	t.links = make([][]Link, n)
	for i := range n {
		t.links[i] = make([]Link, n)
		for j := range n {
			t.links[i][j] = t.gpuLink(i, j, pair(i, j))
		}
		bw := t.specs[i].PCIeBps()
		t.toHost = append(t.toHost, Link{Src: t.gpus[i].ID, Dst: CPU, Kind: LinkPHB, Direct: true, BandwidthBps: bw, Latency: hostLatency})
		t.outHost = append(t.outHost, Link{Src: CPU, Dst: t.gpus[i].ID, Kind: LinkPHB, Direct: true, BandwidthBps: bw, Latency: hostLatency})
	}
	for _, nic := range facts.NICs {
		nic.GPULinks = slices.Clone(nic.GPULinks)
		nic.CPUAffinity = slices.Clone(nic.CPUAffinity)
		t.nics = append(t.nics, nic)
	}
	return t, nil
}

func (t *Topology) gpuLink(i, j int, p Pair) Link {
	l := Link{Src: t.gpus[i].ID, Dst: t.gpus[j].ID, Kind: p.Kind, NVLinks: p.NVLinks, P2P: p.P2P}
	if i == j {
		l.Kind, l.NVLinks, l.P2P = LinkSelf, 0, P2P{}
		l.Direct, l.BandwidthBps = true, 0
		return l
	}
	si, sj := t.specs[i], t.specs[j]
	if p.P2P.Reported() {
		l.Direct = p.P2P.Usable()
	} else {
		l.Estimated = true
		switch p.Kind {
		case LinkNVLink:
			l.Direct = true
		case LinkPIX, LinkPXB, LinkPHB, LinkNODE:
			l.Direct = si.PCIeP2P && sj.PCIeP2P
		}
	}
	if !l.Direct {
		return l
	}
	switch p.Kind {
	case LinkNVLink:
		l.BandwidthBps = min(si.NVLinkBps(p.NVLinks), sj.NVLinkBps(p.NVLinks))
	case LinkNone:
		// Reported P2P without a known path: assume the slowest PCIe level.
		l.BandwidthBps = min(si.PCIeBps(), sj.PCIeBps()) * pcieFactor(LinkSYS)
	default:
		l.BandwidthBps = min(si.PCIeBps(), sj.PCIeBps()) * pcieFactor(p.Kind)
	}
	l.Latency = kindLatency(p.Kind)
	return l
}

// Host returns the host CPU device.
func (t *Topology) Host() DeviceFacts { return t.host }

// GPUs returns the GPUs in order (a copy).
func (t *Topology) GPUs() []DeviceFacts { return slices.Clone(t.gpus) }

// Devices returns the host CPU device followed by the GPUs (a new slice).
func (t *Topology) Devices() []DeviceFacts { return append([]DeviceFacts{t.host}, t.gpus...) }

// NICs returns the network devices the source listed (a copy).
func (t *Topology) NICs() []NIC { return slices.Clone(t.nics) }

// GPUSpec returns the spec used for GPU id and where it came from; false
// when id is not a GPU of the topology.
func (t *Topology) GPUSpec(id DeviceID) (GPUSpec, SpecOrigin, bool) {
	i, ok := t.pos[id]
	if !ok || id.Kind != KindGPU {
		return GPUSpec{}, 0, false
	}
	return t.specs[i], t.origins[i], true
}

// Link returns the modelled hop from src to dst: a GPU pair, a GPU and
// the CPU (kind PHB, the GPU's PCIe rate), or a device with itself (kind
// LinkSelf, zero cost; cpu→cpu included). It reports false when either
// device is unknown.
func (t *Topology) Link(src, dst DeviceID) (Link, bool) {
	if src == CPU && dst == CPU {
		return Link{Src: CPU, Dst: CPU, Kind: LinkSelf, Direct: true}, true
	}
	if src == CPU {
		j, ok := t.pos[dst]
		if !ok {
			return Link{}, false
		}
		return t.outHost[j], true
	}
	i, ok := t.pos[src]
	if !ok {
		return Link{}, false
	}
	if dst == CPU {
		return t.toHost[i], true
	}
	j, ok := t.pos[dst]
	if !ok {
		return Link{}, false
	}
	return t.links[i][j], true
}

// CanP2P reports whether a copy from GPU a to GPU b can go directly
// (peer to peer), as reported or estimated (see New). It is false for
// unknown devices, for the CPU and for a == b.
func (t *Topology) CanP2P(a, b DeviceID) bool {
	if a == b || a.Kind != KindGPU || b.Kind != KindGPU {
		return false
	}
	l, ok := t.Link(a, b)
	return ok && l.Direct
}

// RouteKind says how a Route moves data.
type RouteKind uint8

const (
	// RouteSame: source and destination are the same device; nothing moves.
	RouteSame RouteKind = iota
	// RouteDirect: one hop (GPU→GPU P2P, or between a GPU and the host).
	RouteDirect
	// RouteViaGPU: two P2P hops through an intermediate GPU.
	RouteViaGPU
	// RouteViaHost: device → host memory → device (no usable P2P, or the
	// staged copy is cheaper).
	RouteViaHost
)

// String returns "same", "direct", "via-gpu" or "via-host".
func (k RouteKind) String() string {
	switch k {
	case RouteSame:
		return "same"
	case RouteDirect:
		return "direct"
	case RouteViaGPU:
		return "via-gpu"
	case RouteViaHost:
		return "via-host"
	}
	return fmt.Sprintf("routekind(%d)", int(k))
}

// Route is the cheapest way to move a number of bytes between two devices.
type Route struct {
	Kind  RouteKind     // same device, direct, via a GPU or through the host
	Path  []DeviceID    // source first, destination last
	Hops  []Link        // len(Path)-1 hops
	Bytes int64         // the size the route was chosen for
	Cost  time.Duration // modelled time to move Bytes along Path
}

// Latency is the sum of the hops' latencies.
func (r Route) Latency() time.Duration {
	var d time.Duration
	for _, h := range r.Hops {
		d = addDur(d, h.Latency)
	}
	return d
}

// BandwidthBps is the effective bandwidth of the route for its size in
// bytes/s: Bytes / (Cost − Latency). It is 0 for RouteSame or zero bytes.
func (r Route) BandwidthBps() float64 {
	d := r.Cost - r.Latency()
	if len(r.Hops) == 0 || r.Bytes <= 0 || d <= 0 {
		return 0
	}
	return float64(r.Bytes) / d.Seconds()
}

// Route returns the cheapest route for bytes from src to dst among: the
// direct hop (when P2P is usable, or always between a GPU and the host),
// two P2P hops through one other GPU, and the staged copy src → host →
// dst. A route's cost is the sum of its hops' costs (latency + bytes /
// bandwidth): the copies are store-and-forward, as two copy launches are.
// Ties go to fewer hops, then to the lower intermediate GPU index, then to
// the GPU over the host. Time: O(number of GPUs).
//
// Errors: bytes < 0; src or dst unknown (wrapping ErrUnknownDevice).
func (t *Topology) Route(bytes int64, src, dst DeviceID) (Route, error) {
	return t.route(bytes, src, dst, true)
}

// PairRoute returns the route of the pair's own connection, never through
// another GPU: the direct hop when P2P is usable (or between a GPU and the
// host), else the staged copy src → host → dst. Its BandwidthBps is the
// bandwidth of the pair as such (what `streamdag topo --json` reports as
// bandwidth_bps): on a DGX-1 V100, 50 GB/s for NV2, 25 for NV1 and about
// 7.9 for SYS (two PCIe Gen3 legs one after the other). Errors as Route.
func (t *Topology) PairRoute(bytes int64, src, dst DeviceID) (Route, error) {
	return t.route(bytes, src, dst, false)
}

func (t *Topology) route(bytes int64, src, dst DeviceID, relay bool) (Route, error) {
	if bytes < 0 {
		return Route{}, fmt.Errorf("topology: route %s→%s: negative size %d bytes", src, dst, bytes)
	}
	for _, d := range []DeviceID{src, dst} {
		if _, ok := t.pos[d]; !ok && d != CPU {
			return Route{}, fmt.Errorf("%w %s (route %s→%s)", ErrUnknownDevice, d, src, dst)
		}
	}
	if src == dst {
		return Route{Kind: RouteSame, Path: []DeviceID{src}, Bytes: bytes}, nil
	}
	mk := func(kind RouteKind, hops ...Link) Route {
		r := Route{Kind: kind, Bytes: bytes, Hops: hops, Path: []DeviceID{src}}
		for _, h := range hops {
			r.Path = append(r.Path, h.Dst)
			r.Cost = addDur(r.Cost, h.HopCost(bytes))
		}
		return r
	}
	if src == CPU || dst == CPU {
		l, _ := t.Link(src, dst)
		return mk(RouteDirect, l), nil
	}
	i, j := t.pos[src], t.pos[dst]
	var best Route
	found := false
	try := func(r Route) {
		if !found || r.Cost < best.Cost {
			best, found = r, true
		}
	}
	if l := t.links[i][j]; l.Direct {
		try(mk(RouteDirect, l))
	}
	for k := range t.gpus {
		if !relay || k == i || k == j {
			continue
		}
		if a, b := t.links[i][k], t.links[k][j]; a.Direct && b.Direct {
			try(mk(RouteViaGPU, a, b))
		}
	}
	try(mk(RouteViaHost, t.toHost[i], t.outHost[j]))
	return best, nil
}

// TransferCost returns the modelled time to move bytes from src to dst
// along the best Route: 0 when src == dst. Errors as Route.
func (t *Topology) TransferCost(bytes int64, src, dst DeviceID) (time.Duration, error) {
	r, err := t.Route(bytes, src, dst)
	if err != nil {
		return 0, err
	}
	return r.Cost, nil
}

// NodeID is the gonum node ID of a device in Graph: the GPU index for a
// GPU, -1 for the CPU.
func NodeID(d DeviceID) int64 {
	if d.Kind == KindCPU {
		return -1
	}
	return int64(d.Index)
}

// DeviceOfNode is the inverse of NodeID.
func DeviceOfNode(id int64) DeviceID {
	if id < 0 {
		return CPU
	}
	return GPU(int(id))
}

// Graph returns the topology as a gonum weighted directed graph for moving
// bytes: one node per device (IDs from NodeID), an edge for every usable
// hop (P2P GPU pairs, and both directions between each GPU and the host),
// weighted by the hop's cost in seconds for bytes. gonum's path
// algorithms (path.DijkstraFrom, path.DijkstraAllPaths) apply; unlike
// Route they may find paths of more than two hops. The graph is new on
// each call and owned by the caller. Time: O(GPUs²).
func (t *Topology) Graph(bytes int64) *simple.WeightedDirectedGraph {
	g := simple.NewWeightedDirectedGraph(0, 0)
	g.AddNode(simple.Node(NodeID(CPU)))
	for _, d := range t.gpus {
		g.AddNode(simple.Node(NodeID(d.ID)))
	}
	add := func(l Link) {
		w := l.HopCost(bytes).Seconds()
		g.SetWeightedEdge(g.NewWeightedEdge(simple.Node(NodeID(l.Src)), simple.Node(NodeID(l.Dst)), w))
	}
	for i := range t.gpus {
		add(t.toHost[i])
		add(t.outHost[i])
		for j := range t.gpus {
			if i != j && t.links[i][j].Direct {
				add(t.links[i][j])
			}
		}
	}
	return g
}
