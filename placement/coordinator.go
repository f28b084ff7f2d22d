package placement

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/streamdag/streamdag/topology"
)

// Errors of the Coordinator (test with errors.Is).
var (
	// ErrNoSuitableDevice: no registered device is available (registered,
	// preferred when a preference is set, under the kernel bound).
	ErrNoSuitableDevice = errors.New("placement: no suitable device")
	// ErrDeviceNotRegistered: the device is not registered.
	ErrDeviceNotRegistered = errors.New("placement: device not registered")
	// ErrKernelNotFound: the kernel is not assigned to any device.
	ErrKernelNotFound = errors.New("placement: kernel not found")
	// ErrInvalidSelection: the custom selector is missing or chose an
	// index out of range.
	ErrInvalidSelection = errors.New("placement: invalid device selection")
	// ErrSameDevice: a migration whose target is its source.
	ErrSameDevice = errors.New("placement: migration to the same device")
	// ErrStaleMigration: CompleteMigration for a kernel that is no longer
	// on the request's source device.
	ErrStaleMigration = errors.New("placement: stale migration")
)

// DefaultMaxKernelsPerDevice is the bound of kernels per device without
// WithMaxKernelsPerDevice.
const DefaultMaxKernelsPerDevice = 64

// Option configures a Coordinator (NewCoordinator). An option given bad
// input returns an error, which NewCoordinator returns prefixed with
// "placement: "; nil options are skipped. Without options a Coordinator
// selects least-loaded, with 64 kernels per device, P2P on, no
// preference and no topology.
type Option func(*settings) error

type settings struct {
	strategy   Strategy
	max        int
	disableP2P bool
	preferred  []topology.DeviceID
	selector   func(candidates []DeviceStatus, req SelectRequest) int
	topo       *topology.Topology
}

// WithStrategy sets how Select chooses (default LeastLoaded). Errors:
// Custom (give WithSelector instead), HEFT (Place only) or an unknown
// strategy.
func WithStrategy(s Strategy) Option {
	return func(o *settings) error {
		switch s {
		case Custom:
			return errors.New("WithStrategy: custom: give the selector with WithSelector")
		case LeastLoaded, FirstAvailable, RoundRobin, MemoryBased, ComputeCapability, TopologyAware:
			o.strategy = s
			return nil
		}
		return fmt.Errorf("WithStrategy: %v is not a strategy of Select", s)
	}
}

// WithSelector makes Select ask sel (the Custom strategy): given the
// status of the candidate devices (in ID order) it returns an index into
// that slice. It is called without the Coordinator's lock held, so it may
// call the Coordinator. Errors: a nil sel.
func WithSelector(sel func(candidates []DeviceStatus, req SelectRequest) int) Option {
	return func(o *settings) error {
		if sel == nil {
			return errors.New("WithSelector: nil selector")
		}
		o.strategy, o.selector = Custom, sel
		return nil
	}
}

// WithMaxKernelsPerDevice bounds the kernels on one device for selection
// and migration planning to n (default DefaultMaxKernelsPerDevice).
// Errors: n < 1.
func WithMaxKernelsPerDevice(n int) Option {
	return func(o *settings) error {
		if n < 1 {
			return fmt.Errorf("WithMaxKernelsPerDevice(%d): want at least 1", n)
		}
		o.max = n
		return nil
	}
}

// WithoutP2P makes CanP2P false for every pair.
func WithoutP2P() Option {
	return func(o *settings) error { o.disableP2P = true; return nil }
}

// WithPreferred restricts Select to the devices ids (copied). Errors: no
// ids, or an ID given twice.
func WithPreferred(ids ...topology.DeviceID) Option {
	return func(o *settings) error {
		if len(ids) == 0 {
			return errors.New("WithPreferred: no device")
		}
		for i, id := range ids {
			if slices.Contains(ids[:i], id) {
				return fmt.Errorf("WithPreferred: %v given twice", id)
			}
		}
		o.preferred = slices.Clone(ids)
		return nil
	}
}

// WithTopology gives the machine's topology (CanP2P, topology-aware
// selection, migration routes, kernel-to-kernel placement); without it
// none is known. Errors: a nil topo.
func WithTopology(topo *topology.Topology) Option {
	return func(o *settings) error {
		if topo == nil {
			return errors.New("WithTopology: nil topology")
		}
		o.topo = topo
		return nil
	}
}

// DeviceInfo describes a device registered with a Coordinator.
type DeviceInfo struct {
	ID                topology.DeviceID          // unique among the registered devices
	Name              string                     // for people, e.g. "NVIDIA H100 80GB HBM3"
	TotalMemoryBytes  int64                      // device memory in bytes
	FreeMemoryBytes   int64                      // free device memory in bytes, as registered or set by UpdateFreeMemory
	ComputeCapability topology.ComputeCapability // CUDA compute capability; zero when none
}

// MemoryUtilization is 1 − free/total, or 0 when total is 0.
func (d DeviceInfo) MemoryUtilization() float64 {
	if d.TotalMemoryBytes <= 0 {
		return 0
	}
	return 1 - float64(d.FreeMemoryBytes)/float64(d.TotalMemoryBytes)
}

// DeviceStatus is a snapshot of one registered device.
type DeviceStatus struct {
	Info      DeviceInfo // as registered
	Kernels   []string   // sorted
	Available bool       // len(Kernels) < the kernel bound
	Load      float64    // len(Kernels) / the kernel bound
}

// SelectRequest carries what a selection may consider.
type SelectRequest struct {
	// Inputs are the devices holding the kernel's inputs and InputBytes
	// the bytes read from each (TopologyAware).
	Inputs     []topology.DeviceID
	InputBytes int64 // bytes read from each of Inputs
}

// CoordinatorStats is a snapshot of a Coordinator's counters.
type CoordinatorStats struct {
	Devices          int    // registered devices
	Kernels          int    // kernels assigned now
	TotalMemoryBytes int64  // sum over registered devices
	FreeMemoryBytes  int64  // sum over registered devices
	KernelsAssigned  uint64 // Assign calls that succeeded, ever
	Migrations       uint64 // migrations completed (CompleteMigration and Unregister plans)
}

// MigrationPlan moves one kernel off a device being unregistered.
type MigrationPlan struct {
	Kernel         string            // the kernel's name
	Source, Target topology.DeviceID // from the unregistered device to a registered one
}

// UnregisterResult is what Unregister did: Migrations were applied (the
// kernels are now assigned to their targets; the caller moves their state)
// and Orphaned kernels were removed because no device could take them.
type UnregisterResult struct {
	Device     topology.DeviceID // the unregistered device
	Migrations []MigrationPlan   // applied, one per kernel moved
	Orphaned   []string          // names of the kernels no device could take, removed
}

// MigrationRequest is a planned move of one kernel (RequestMigration).
type MigrationRequest struct {
	Kernel         string            // the kernel's name
	Source, Target topology.DeviceID // where it is and where it goes
	// Route and EstimatedCost are the topology's best route and time for
	// the kernel's state bytes; zero without a topology.
	Route         topology.Route
	EstimatedCost time.Duration
}

// Coordinator tracks devices and the kernels assigned to them, chooses
// devices for new kernels, and plans migrations: the placement engine's
// front-end for kernels that come and go one at a time (Select and
// SelectForK2K choose among the registered devices, Unregister plans with
// Spread). It knows a kernel by its name (as dag.Kernel.Name). Its
// strategies are those of RingKernel's MultiGpuCoordinator
// (ringkernel-core), with these guarantees:
//
//   - Re-assigning a kernel moves it: the old device's count drops.
//     Counts are the sizes of per-device kernel sets, so no count can
//     underflow.
//   - Select never returns a device that was filtered out or is full:
//     with no available candidate every strategy returns
//     ErrNoSuitableDevice.
//   - Ties in memory-based and compute-capability selection go to the
//     lowest ID; the custom selector's choice is checked
//     (ErrInvalidSelection), not trusted.
//   - Unregister updates the planned loads as it plans, so the kernels of
//     a removed device spread out over the survivors; it never targets
//     an unregistered device, and the device is removed from the
//     registry.
//   - CanP2P comes from the topology, not from two per-device flags.
//   - CompleteMigration checks that the kernel is still on the source and
//     changes nothing otherwise (ErrStaleMigration).
//   - A topology set by the caller is never overwritten by a discovery.
//   - One mutex guards all state; no method takes a lock twice, so no
//     call can deadlock behind a writer. Callbacks run without the lock.
//
// All methods are safe for concurrent use.
type Coordinator struct {
	cfg     settings
	max     int
	mu      sync.Mutex
	devices map[topology.DeviceID]DeviceInfo
	kernels map[topology.DeviceID]map[string]struct{}
	where   map[string]topology.DeviceID
	topo    *topology.Topology
	rr      uint64
	stats   CoordinatorStats
}

// NewCoordinator returns an empty Coordinator configured by opts, applied
// in order. It starts no goroutine. Errors: the first option's error.
func NewCoordinator(opts ...Option) (*Coordinator, error) {
	cfg := settings{max: DefaultMaxKernelsPerDevice}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("placement: %w", err)
		}
	}
	return &Coordinator{cfg: cfg, max: cfg.max, devices: map[topology.DeviceID]DeviceInfo{},
		kernels: map[topology.DeviceID]map[string]struct{}{}, where: map[string]topology.DeviceID{}, topo: cfg.topo}, nil
}

// Register adds a device, or replaces the info of a registered one (its
// kernels stay).
func (c *Coordinator) Register(d DeviceInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.devices[d.ID] = d
	if c.kernels[d.ID] == nil {
		c.kernels[d.ID] = map[string]struct{}{}
	}
}

// SetTopology replaces the topology (nil: none).
func (c *Coordinator) SetTopology(t *topology.Topology) {
	c.mu.Lock()
	c.topo = t
	c.mu.Unlock()
}

// Topology returns the topology, nil when none was set.
func (c *Coordinator) Topology() *topology.Topology {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.topo
}

// ids returns the registered device IDs in order (cpu first, then GPUs by
// index). Callers hold c.mu.
func (c *Coordinator) ids() []topology.DeviceID {
	ids := slices.Collect(maps.Keys(c.devices))
	slices.SortFunc(ids, cmpID)
	return ids
}

func cmpID(a, b topology.DeviceID) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Index, b.Index))
}

func (c *Coordinator) status(id topology.DeviceID) DeviceStatus {
	ks := slices.Collect(maps.Keys(c.kernels[id]))
	slices.Sort(ks)
	return DeviceStatus{Info: c.devices[id], Kernels: ks, Available: len(ks) < c.max, Load: float64(len(ks)) / float64(c.max)}
}

// Devices returns the registered devices in ID order.
func (c *Coordinator) Devices() []DeviceInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []DeviceInfo
	for _, id := range c.ids() {
		out = append(out, c.devices[id])
	}
	return out
}

// Status returns the status of every registered device, in ID order.
func (c *Coordinator) Status() []DeviceStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []DeviceStatus
	for _, id := range c.ids() {
		out = append(out, c.status(id))
	}
	return out
}

// DeviceStatus returns the status of one device; false when it is not
// registered.
func (c *Coordinator) DeviceStatus(id topology.DeviceID) (DeviceStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.devices[id]; !ok {
		return DeviceStatus{}, false
	}
	return c.status(id), true
}

// Stats returns a snapshot of the counters.
func (c *Coordinator) Stats() CoordinatorStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Devices, s.Kernels, s.TotalMemoryBytes, s.FreeMemoryBytes = len(c.devices), len(c.where), 0, 0
	for _, d := range c.devices {
		s.TotalMemoryBytes += d.TotalMemoryBytes
		s.FreeMemoryBytes += d.FreeMemoryBytes
	}
	return s
}

// UpdateFreeMemory sets a device's free memory in bytes. Errors:
// ErrDeviceNotRegistered.
func (c *Coordinator) UpdateFreeMemory(id topology.DeviceID, freeBytes int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.devices[id]
	if !ok {
		return fmt.Errorf("%w: %s", ErrDeviceNotRegistered, id)
	}
	d.FreeMemoryBytes = freeBytes
	c.devices[id] = d
	return nil
}

// CanP2P reports whether a and b are both registered, P2P is not disabled,
// and the topology says a copy a→b can go peer to peer. Without a
// topology it is false.
func (c *Coordinator) CanP2P(a, b topology.DeviceID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.canP2P(a, b)
}

func (c *Coordinator) canP2P(a, b topology.DeviceID) bool {
	_, okA := c.devices[a]
	_, okB := c.devices[b]
	return okA && okB && !c.cfg.disableP2P && c.topo != nil && c.topo.CanP2P(a, b)
}

// Assign records kernel k on device id, moving it if it was elsewhere.
// Errors: ErrDeviceNotRegistered (nothing changes).
func (c *Coordinator) Assign(k string, id topology.DeviceID) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.devices[id]; !ok {
		return fmt.Errorf("%w: %s (assign %s)", ErrDeviceNotRegistered, id, k)
	}
	c.move(k, id)
	c.stats.KernelsAssigned++
	return nil
}

// move puts k on id, off its old device. Callers hold c.mu.
func (c *Coordinator) move(k string, id topology.DeviceID) {
	if old, ok := c.where[k]; ok {
		delete(c.kernels[old], k)
	}
	c.where[k] = id
	c.kernels[id][k] = struct{}{}
}

// Remove forgets kernel k; it reports whether k was assigned.
func (c *Coordinator) Remove(k string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.where[k]
	if ok {
		delete(c.kernels[id], k)
		delete(c.where, k)
	}
	return ok
}

// DeviceOf returns the device of kernel k; false when k is not assigned.
func (c *Coordinator) DeviceOf(k string) (topology.DeviceID, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.where[k]
	return id, ok
}

// KernelsOn returns the kernels on device id, sorted.
func (c *Coordinator) KernelsOn(id topology.DeviceID) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ks := slices.Collect(maps.Keys(c.kernels[id]))
	slices.Sort(ks)
	return ks
}

// Select chooses a device for a new kernel by the configured strategy
// among the available candidates: registered devices (only the Preferred
// ones when set) holding fewer than the kernel bound kernels. It does
// not assign anything. Errors: ErrNoSuitableDevice when there is no
// candidate; ErrInvalidSelection for a missing custom selector or an
// out-of-range choice. Time: O(devices × inputs).
func (c *Coordinator) Select(req SelectRequest) (topology.DeviceID, error) {
	c.mu.Lock()
	cands := c.candidates()
	if len(cands) == 0 {
		c.mu.Unlock()
		return topology.DeviceID{}, fmt.Errorf("%w: %d registered, none available", ErrNoSuitableDevice, len(c.devices))
	}
	if c.cfg.strategy == Custom {
		sel := c.cfg.selector // WithSelector set both
		c.mu.Unlock()
		i := sel(slices.Clone(cands), req)
		if i < 0 || i >= len(cands) {
			return topology.DeviceID{}, fmt.Errorf("%w: selector chose %d of %d candidates", ErrInvalidSelection, i, len(cands))
		}
		return cands[i].Info.ID, nil
	}
	defer c.mu.Unlock()
	return choose(c.cfg.strategy, cands, req, c.topo, &c.rr), nil
}

// candidates returns the status of the available candidates in ID order.
// Callers hold c.mu.
func (c *Coordinator) candidates() []DeviceStatus {
	var out []DeviceStatus
	for _, id := range c.ids() {
		if len(c.cfg.preferred) > 0 && !slices.Contains(c.cfg.preferred, id) {
			continue
		}
		if s := c.status(id); s.Available {
			out = append(out, s)
		}
	}
	return out
}

// Unregister removes device id and plans where its kernels go: each, in
// sorted order, goes to the registered device with the fewest kernels
// counting the ones planned so far (ties: the cheapest transfer from id
// when a topology is set, then the lowest ID), among devices under
// the kernel bound; kernels no device can take are orphaned (see
// Spread). The plan is applied before Unregister returns (the kernels are
// assigned to their targets, orphans are removed); moving their state is
// the caller's job (for a plan of package exec: Executor.Drain with
// UnregisterResult.Migrations).
// Errors: ErrDeviceNotRegistered (nothing changes).
func (c *Coordinator) Unregister(id topology.DeviceID) (UnregisterResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.devices[id]; !ok {
		return UnregisterResult{}, fmt.Errorf("%w: %s", ErrDeviceNotRegistered, id)
	}
	res := UnregisterResult{Device: id}
	var targets []Target
	for _, t := range c.ids() {
		targets = append(targets, Target{ID: t, Kernels: len(c.kernels[t])})
	}
	res.Migrations, res.Orphaned = Spread(id, slices.Collect(maps.Keys(c.kernels[id])), targets, c.max, c.topo, nil)
	for _, m := range res.Migrations {
		c.move(m.Kernel, m.Target)
		c.stats.Migrations++
	}
	for _, k := range res.Orphaned {
		delete(c.where, k)
	}
	delete(c.devices, id)
	delete(c.kernels, id)
	return res, nil
}

// RequestMigration plans moving kernel k to target; stateBytes is the
// size of its state, for the route and cost estimate. Nothing changes
// until CompleteMigration. Errors: ErrKernelNotFound,
// ErrDeviceNotRegistered (target), ErrSameDevice.
func (c *Coordinator) RequestMigration(k string, target topology.DeviceID, stateBytes int64) (MigrationRequest, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	src, ok := c.where[k]
	if !ok {
		return MigrationRequest{}, fmt.Errorf("%w: %s", ErrKernelNotFound, k)
	}
	if _, ok := c.devices[target]; !ok {
		return MigrationRequest{}, fmt.Errorf("%w: %s (migrate %s)", ErrDeviceNotRegistered, target, k)
	}
	if src == target {
		return MigrationRequest{}, fmt.Errorf("%w: %s is already on %s", ErrSameDevice, k, target)
	}
	req := MigrationRequest{Kernel: k, Source: src, Target: target}
	if c.topo != nil {
		if r, err := c.topo.Route(max(stateBytes, 0), src, target); err == nil {
			req.Route, req.EstimatedCost = r, r.Cost
		}
	}
	return req, nil
}

// CompleteMigration applies req: the kernel moves from req.Source to
// req.Target. Errors (nothing changes): ErrKernelNotFound when the kernel
// is gone, ErrStaleMigration when it is no longer on req.Source,
// ErrDeviceNotRegistered when the target was unregistered meanwhile.
func (c *Coordinator) CompleteMigration(req MigrationRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	src, ok := c.where[req.Kernel]
	switch {
	case !ok:
		return fmt.Errorf("%w: %s", ErrKernelNotFound, req.Kernel)
	case src != req.Source:
		return fmt.Errorf("%w: %s is on %s, not %s", ErrStaleMigration, req.Kernel, src, req.Source)
	}
	if _, ok := c.devices[req.Target]; !ok {
		return fmt.Errorf("%w: %s (migrate %s)", ErrDeviceNotRegistered, req.Target, req.Kernel)
	}
	c.move(req.Kernel, req.Target)
	c.stats.Migrations++
	return nil
}

// SelectForK2K chooses a device for a kernel that talks to kernel src:
// among the available devices that src's device reaches peer to peer
// (CanP2P), the one with the highest pair bandwidth / (load + 0.1), where
// bandwidth is the topology's PairRoute bandwidth in GB/s and load is
// kernels / the kernel bound; ties go to the lowest ID. When src is
// unknown or has no such neighbour it falls back to Select with an empty
// request. Errors as Select.
func (c *Coordinator) SelectForK2K(src string) (topology.DeviceID, error) {
	c.mu.Lock()
	dev, ok := c.where[src]
	var bestID topology.DeviceID
	bestScore := -1.0
	if ok && c.topo != nil {
		for _, s := range c.candidates() {
			id := s.Info.ID
			if id == dev || !c.canP2P(dev, id) {
				continue
			}
			r, err := c.topo.PairRoute(64<<20, dev, id)
			if err != nil {
				continue
			}
			if score := r.BandwidthBps() / 1e9 / (s.Load + 0.1); score > bestScore {
				bestID, bestScore = id, score
			}
		}
	}
	c.mu.Unlock()
	if bestScore >= 0 {
		return bestID, nil
	}
	return c.Select(SelectRequest{})
}
