package lease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// The reasons a backend refuses or ends work, as sentinels: callers
// branch with errors.Is, never on the text. Each message starts with the
// reason's stable snake_case name.
var (
	// ErrBackendAlreadyLive: New while another backend of this process is
	// live, still draining its GPU resources, or failed closed.
	ErrBackendAlreadyLive = errors.New("lease: backend_already_live: another backend owns this process's devices")
	// ErrBackendClosing: a new admission (Claim, Acquire), service read
	// (Devices) or attempt begin after Close was signalled; and Close
	// itself, to every caller after the one that signalled it.
	ErrBackendClosing = errors.New("lease: backend_closing: the backend is closing")
	// ErrBackendCloseTimeout: CloseAndWait reached its deadline before
	// both quiescence scopes; the *CloseError carries the facts, and
	// cleanup goes on.
	ErrBackendCloseTimeout = errors.New("lease: backend_close_timeout: cleanup did not finish in time")
	// ErrCleanupFailedClosed: a cleanup phase could not prove completion;
	// the GPU resources are leaked on purpose and the process keeps the
	// owner lease (no new backend in this process).
	ErrCleanupFailedClosed = errors.New("lease: cleanup_failed_closed: cleanup failed; the backend failed closed")
	// ErrReentrantObservationClose: CloseAndWait called from inside an
	// observer callback (it would wait for itself); close is not
	// signalled.
	ErrReentrantObservationClose = errors.New("lease: reentrant_observation_close: close-and-wait called from an observer")
)

// DefaultCleanupSlice is the default slice of close work (see
// WithCleanupSlice).
const DefaultCleanupSlice = 10 * time.Millisecond

// Option configures New (a Backend) or NewPool (a Pool). A Pool takes only
// WithHealthCheck; the others configure a Backend, and NewPool refuses
// them. An option given bad input returns an error, which New and NewPool
// return prefixed with "lease: ", building nothing. Options apply in
// order; a later one of the same kind replaces an earlier one. Without
// options New builds a backend with no GPU (CPU-only) that leases the
// devices of every registered gpu.Enumerator, with no hooks and no
// observer.
type Option func(*settings) error

// settings are what the options set; the zero value is the defaults.
type settings struct {
	devices      []topology.DeviceFacts
	drivers      []string // nil: every registered gpu.Enumerator
	leaseTypes   []string // nil: {"gpu"}
	streams      int      // 0: 1
	cleanupSlice time.Duration
	rollbackWait time.Duration
	hooks        Hooks
	healthCheck  HealthCheck
	source       string
	observer     func(ctx context.Context, r AttemptReport)
	backendOnly  string // the first option applied that only a Backend takes
}

// backendOption marks s as set by name, an option only a Backend takes.
func (s *settings) backendOption(name string) {
	if s.backendOnly == "" {
		s.backendOnly = name
	}
}

// applyOptions applies opts in order (skipping nil ones) and returns the
// first option's error, prefixed with "lease: ".
func applyOptions(opts []Option) (settings, error) {
	var s settings
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&s); err != nil {
			return settings{}, fmt.Errorf("lease: %w", err)
		}
	}
	return s, nil
}

// WithDevices makes the backend own the GPUs of devices, in slot order
// (for example the Devices of gpu/nvml's Inventory); the devices are
// copied. Entries that are not GPUs (the CPU device) are skipped.
// Without the option the backend owns no GPU of its own. Errors: a GPU ID
// given twice, a GPU with a negative index or memory.
func WithDevices(devices []topology.DeviceFacts) Option {
	return func(s *settings) error {
		s.backendOption("WithDevices")
		seen := map[topology.DeviceID]bool{}
		out := make([]topology.DeviceFacts, 0, len(devices))
		for _, d := range devices {
			if d.ID.Kind != topology.KindGPU {
				continue
			}
			if seen[d.ID] {
				return fmt.Errorf("WithDevices: %v given twice", d.ID)
			}
			if d.ID.Index < 0 || d.MemoryBytes < 0 {
				return fmt.Errorf("WithDevices: %v: negative index or memory", d.ID)
			}
			seen[d.ID] = true
			d.CPUAffinity = slices.Clone(d.CPUAffinity)
			out = append(out, d)
		}
		s.devices = out
		return nil
	}
}

// WithDrivers names the registered drivers whose devices the backend
// leases besides WithDevices' GPUs, each a gpu.Enumerator (gpu/opencl's
// "opencl"): their devices (of WithLeaseTypes' types) follow those GPUs in
// the slot order, driver by driver in the order given, each in its
// driver's order. A found device that is one of WithDevices' GPUs (the
// same UUID or PCI bus ID: NVIDIA's OpenCL driver lists the GPUs NVML
// does) gets no slot of its own: it is how Backend.Acquire runs that GPU.
// With no kinds, no driver is asked (and no driver library loaded);
// without the option, every registered gpu.Enumerator is, in gpu.Drivers
// order. A driver whose Enumerate fails adds nothing, and a found device
// whose ID another slot has is left out; Backend.Notes says so. Errors
// (from New, which looks the kinds up): a kind that is not registered,
// or whose driver is no gpu.Enumerator.
func WithDrivers(kinds ...string) Option {
	return func(s *settings) error {
		s.backendOption("WithDrivers")
		s.drivers = append([]string{}, kinds...)
		return nil
	}
}

// WithLeaseTypes sets the types (gpu.Found.Type) of the found devices that
// get a slot; the default is {"gpu"}: GPUs of any vendor. Name "cpu" to
// lease a CPU OpenCL device (PoCL) too. Found devices that match a GPU of
// WithDevices are used for it whatever their type. Errors: no type, or an
// unknown one.
func WithLeaseTypes(types ...string) Option {
	return func(s *settings) error {
		s.backendOption("WithLeaseTypes")
		if len(types) == 0 {
			return fmt.Errorf("WithLeaseTypes: no device type (want some of %v)", foundTypes)
		}
		for _, t := range types {
			if !slices.Contains(foundTypes, t) {
				return fmt.Errorf("WithLeaseTypes: unknown device type %q (want one of %v)", t, foundTypes)
			}
		}
		s.leaseTypes = slices.Clone(types)
		return nil
	}
}

// WithStreams sets the number of streams n each GPU's startup record must
// show (default 1). Errors: n < 1.
func WithStreams(n int) Option {
	return func(s *settings) error {
		s.backendOption("WithStreams")
		if n < 1 {
			return fmt.Errorf("WithStreams(%d): want at least 1 stream", n)
		}
		s.streams = n
		return nil
	}
}

// WithCleanupSlice bounds one slice of close work to d (default
// DefaultCleanupSlice): each hook call gets a context that expires after
// it, and the close coordinator re-checks its pending phase at least this
// often. Errors: d <= 0.
func WithCleanupSlice(d time.Duration) Option {
	return func(s *settings) error {
		s.backendOption("WithCleanupSlice")
		if d <= 0 {
			return fmt.Errorf("WithCleanupSlice(%v): want a positive duration", d)
		}
		s.cleanupSlice = d
		return nil
	}
}

// WithRollbackWait sets how long a failed New waits for its rollback
// cleanup before handing it to the close coordinator (default: the
// cleanup slice, see WithCleanupSlice). Errors: d <= 0.
func WithRollbackWait(d time.Duration) Option {
	return func(s *settings) error {
		s.backendOption("WithRollbackWait")
		if d <= 0 {
			return fmt.Errorf("WithRollbackWait(%v): want a positive duration", d)
		}
		s.rollbackWait = d
		return nil
	}
}

// WithHooks sets the steps that install and release the per-device
// resources. Without the option (and for each nil hook) they do nothing,
// and the default startup record names the driver Acquire opens the
// device with, or Runtime "none" when there is none.
func WithHooks(h Hooks) Option {
	return func(s *settings) error {
		s.backendOption("WithHooks")
		s.hooks = h
		return nil
	}
}

// WithSource says where WithDevices' GPUs came from, for Acquire's reason
// when the backend owns no GPU ("no GPU: " + source), e.g. the status of
// the NVML library gpu/nvml's Discover asked (Inventory.NVML.String()).
// The default is "devices not discovered (lease.New)". Errors: an empty
// source.
func WithSource(source string) Option {
	return func(s *settings) error {
		s.backendOption("WithSource")
		if source == "" {
			return errors.New("WithSource: empty source")
		}
		s.source = source
		return nil
	}
}

// WithObserver makes the backend give every attempt report to observe,
// synchronously on the goroutine that calls Attempt.Finish, while the
// attempt still holds its observation permit, with a ctx that marks the
// call as an observation (ctx ends only with the process). CloseAndWait
// and CloseAndWaitUntil given that ctx (or one derived from it) return
// ErrReentrantObservationClose before close is signalled: waiting for
// quiescence from inside an observation would wait for itself. Under a
// ctx that does not carry the mark they cannot tell, and wait until that
// ctx ends. Close, CloseSnapshot and MetricsSnapshot are fine from inside
// an observation. Errors: a nil observe.
func WithObserver(observe func(ctx context.Context, r AttemptReport)) Option {
	return func(s *settings) error {
		s.backendOption("WithObserver")
		if observe == nil {
			return errors.New("WithObserver: nil observer")
		}
		s.observer = observe
		return nil
	}
}

// Hooks are the device-specific steps of a backend's life. Each is
// optional. The close hooks run on the backend's close coordinator
// goroutine, one bounded slice at a time: their ctx expires after
// the cleanup slice (WithCleanupSlice); returning an error that is ctx's error
// (context.DeadlineExceeded) means "not done yet, call me again next
// slice"; any other error fails the backend closed. A hook that ignores
// ctx and blocks holds up the coordinator (and CloseAndWait times out).
type Hooks struct {
	// Install installs the resources of one GPU (context, memory manager,
	// stream pool) on the caller's goroutine during New and returns
	// what it installed. ctx is never done.
	Install func(ctx context.Context, p DeviceProfile) (StartupRecord, error)
	// Drain drains one GPU's service pools (close phase 1).
	Drain func(ctx context.Context, id topology.DeviceID) error
	// Release frees one installed GPU's resources (close phase 3, in
	// reverse install order, once no GPU permit is held).
	Release func(ctx context.Context, id topology.DeviceID) error
}

// DeviceProfile is the validated request for one GPU.
type DeviceProfile struct {
	Device  topology.DeviceFacts
	Streams int // streams the startup record must show, >= 1
}

// StartupRecord says what was installed on one GPU. New checks every
// record against its DeviceProfile (same device ID, same UUID when the
// profile has one, same stream count) before the backend is published.
type StartupRecord struct {
	Device      string `json:"device"`       // "gpu3"
	UUID        string `json:"uuid"`         // the device's UUID, as in DeviceFacts
	Name        string `json:"name"`         // the device's model name
	MemoryBytes int64  `json:"memory_bytes"` // total device memory in bytes, as in DeviceFacts
	Streams     int    `json:"streams"`      // streams installed, as the profile asked
	// Vendor is the device's vendor as its driver names it; "" when
	// unknown.
	Vendor string `json:"vendor,omitempty"`
	// Runtime names what Backend.Acquire runs the device with, by
	// default: the driver kind that opens it ("opencl"; for a GPU of
	// Devices reached through a found device, "opencl opencl1"), or
	// "none" when no registered driver can run it (an NVIDIA GPU with no
	// CUDA device and no OpenCL driver listing it); or what a hook set.
	Runtime string `json:"runtime"`
}

// Identity names one backend of this process.
type Identity struct {
	// ID is unique in the process and increases with each New that gets
	// as far as claiming the owner lease (1, 2, …).
	ID      uint64   `json:"id"`
	Devices []string `json:"devices"` // GPU IDs in slot order
}

// CloseSnapshot is a point-in-time view of close progress, readable at
// any time (Backend.CloseSnapshot).
type CloseSnapshot struct {
	// Closing: Close has been signalled.
	Closing bool `json:"closing"`
	// GPUResourceQuiescent: no GPU permit is held, the resources are
	// released and the owner lease is free.
	GPUResourceQuiescent bool `json:"gpu_resource_quiescent"`
	// ObservationQuiescent: every begun attempt has finished and its
	// report was delivered.
	ObservationQuiescent bool `json:"observation_quiescent"`
	// ActiveGPUPermits counts the claims (Backend.Claim, Backend.Acquire)
	// held now; the gpu_permits phase waits for 0.
	ActiveGPUPermits int64 `json:"active_gpu_permits"`
	// ActiveObservationPermits counts the attempts begun and not yet
	// finished; the observation phase waits for 0.
	ActiveObservationPermits int64 `json:"active_observation_permits"`
	// CleanupFailed: a cleanup phase failed closed (ErrCleanupFailedClosed).
	CleanupFailed bool `json:"cleanup_failed"`
	// CleanupDeadlineElapsedCount counts phases that a waiter's deadline
	// caught before they completed (each phase at most once).
	CleanupDeadlineElapsedCount int `json:"cleanup_deadline_elapsed_count"`
	// CleanupLateSuccessCount counts such phases that completed later.
	CleanupLateSuccessCount int `json:"cleanup_late_success_count"`
	// Phase is the pending cleanup phase: "open" before close, then
	// "service", "journal", "gpu_permits", "observation", "done"; or
	// "failed".
	Phase string `json:"phase"`
}

// CloseError is the error of CloseAndWait and CloseAndWaitUntil. Reason
// is ErrBackendCloseTimeout or ErrCleanupFailedClosed; errors.Is matches
// it and Err (ctx's error on a timeout, the hook's error on a failure).
type CloseError struct {
	Reason   error         // ErrBackendCloseTimeout or ErrCleanupFailedClosed
	Err      error         // the cause: ctx's error, or the failing hook's
	Snapshot CloseSnapshot // the facts when the call returned
}

// Error names the reason, the pending phase, the active permits and the cause.
func (e *CloseError) Error() string {
	return fmt.Sprintf("%v (phase %s, %d GPU and %d observation permits active): %v", e.Reason, e.Snapshot.Phase,
		e.Snapshot.ActiveGPUPermits, e.Snapshot.ActiveObservationPermits, e.Err)
}

// Unwrap returns Reason and Err.
func (e *CloseError) Unwrap() []error { return []error{e.Reason, e.Err} }

// RollbackCleanup says what became of the resources a failed New had
// installed.
type RollbackCleanup struct {
	Installed int `json:"installed"` // devices installed before the failure
	// Finished: the rollback reached GPU-resource quiescence within
	// the rollback wait (WithRollbackWait) and the owner lease is free again.
	Finished bool `json:"finished"`
	// Transferred: it did not; the close coordinator goes on alone and
	// frees the owner lease later, so a retry may briefly see
	// ErrBackendAlreadyLive.
	Transferred bool `json:"transferred"`
	// Failed: the rollback cleanup failed closed (the lease is kept).
	Failed bool `json:"failed"`
}

// ConstructionError is New's error after the owner lease was claimed:
// Err says why (a hook error, a startup record that does not match its
// profile), Rollback what became of the installed resources.
type ConstructionError struct {
	Err      error           // why New failed
	Rollback RollbackCleanup // what became of the resources installed so far
}

// Error names the cause and what became of the rollback.
func (e *ConstructionError) Error() string {
	state := "finished"
	switch {
	case e.Rollback.Failed:
		state = "failed closed"
	case e.Rollback.Transferred:
		state = "handed to the close coordinator"
	}
	return fmt.Sprintf("%v (rollback of %d installed devices %s)", e.Err, e.Rollback.Installed, state)
}

// Unwrap returns Err.
func (e *ConstructionError) Unwrap() error { return e.Err }

// The process-wide live-backend owner lease.
var owner struct {
	mu   sync.Mutex
	held bool
}

var backendSeq atomic.Uint64

func claimOwner() bool {
	owner.mu.Lock()
	defer owner.mu.Unlock()
	if owner.held {
		return false
	}
	owner.held = true
	return true
}

func releaseOwner() {
	owner.mu.Lock()
	owner.held = false
	owner.mu.Unlock()
}

type phase uint8

const (
	phaseOpen phase = iota
	phaseService
	phaseJournal
	phaseGPUPermits
	phaseObservation
	phaseDone
	numPhases
)

var phaseNames = [...]string{"open", "service", "journal", "gpu_permits", "observation", "done"}

// resources is the resource generation: what New installed.
// Sessions point to it weakly; the backend drops its only strong reference
// when phase gpu_permits releases it (or never, on a failed close).
type resources struct {
	pool    *Pool
	devices []topology.DeviceFacts // leasable devices, slot order
}

// route is how Acquire opens a leased device: the driver that found it
// and what it found.
type route struct {
	kind  string
	drv   gpu.Enumerator
	found gpu.Found
}

// Backend is the process-owned device backend: the lease pool over the
// GPUs of WithDevices and the devices the drivers list. At most one is live per process (an owner lease, claimed
// by New and freed only at GPU-resource quiescence). A *Backend is the
// public handle: Go has no drop, so there is no "last handle" close —
// call Close or CloseAndWait; a Backend that is never closed keeps the
// owner lease for the life of the process. No goroutine runs before
// Close; after Close one close coordinator goroutine runs the cleanup and
// exits at the end (or on a failure); CloseAndWait returns only after it
// has exited or its ctx is done.
//
// Lifecycle gate: Close flips the gate under the same mutex every new
// admission (Claim), service read (Devices) and attempt begin
// (BeginAttempt) takes, so nothing slips in after it: from then on they
// return ErrBackendClosing, while leases and attempts already granted run
// to completion and are waited for.
//
// All methods are safe for concurrent use.
type Backend struct {
	id      Identity
	cfg     settings
	records []StartupRecord
	routes  map[topology.DeviceID]route // immutable after New
	notes   []string                    // immutable after New

	procConfig map[string]string // guarded by mu; see SetProcessConfig

	closeCtx    context.Context // done once Close has been signalled
	closeSignal context.CancelFunc

	mu         sync.Mutex
	res        *resources          // nil after release
	journal    []topology.DeviceID // the construction journal; dropped in phase journal
	installed  []topology.DeviceID // every GPU whose Install succeeded, in order
	changed    chan struct{}       // closed and replaced on every change
	wake       chan struct{}       // buffered(1): wakes the coordinator
	workerDone chan struct{}       // closed when the coordinator exits; nil before Close
	closing    bool
	phase      phase
	failed     error
	timedOut   [numPhases]bool
	drained    map[topology.DeviceID]bool
	released   map[topology.DeviceID]bool
	gpuQuiet   bool
	obsQuiet   bool
	deadlines  int
	late       int
	m          counters
	reports    []AttemptReport // newest last, at most maxReports
}

type counters struct {
	gen               uint64
	gpuPermits        int64
	obsPermits        int64
	attemptsBegun     uint64
	attemptsFinished  uint64
	attemptsRefused   uint64
	attemptsFailed    uint64
	attemptsUnplanned uint64
	admissions        uint64
	admissionsRefused uint64
	serviceRefused    uint64
}

const maxReports = 64

// New applies opts, asks the drivers of WithDrivers for their devices
// (gpu.Enumerator.Enumerate: nothing is opened), claims the process's
// owner lease, installs every leasable device's resources (Hooks.Install,
// in slot order, on the caller's goroutine), checks each startup record
// against its profile, and publishes the backend. It starts no goroutine.
//
// Errors: an option's error, or an unknown or non-enumerating driver of
// WithDrivers (nothing claimed); ErrBackendAlreadyLive while another
// backend is live, draining or failed closed; a *ConstructionError
// when an install fails or a record does not match, after rolling back
// what was installed (see RollbackCleanup: the close coordinator takes the
// resources over; if it does not finish within RollbackWait it goes on
// alone and frees the owner lease later).
func New(opts ...Option) (*Backend, error) {
	cfg, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	profiles := cfg.defaults()
	found, err := discover(&cfg, profiles)
	if err != nil {
		return nil, err
	}
	profiles = append(profiles, found.profiles...)
	if !claimOwner() {
		return nil, ErrBackendAlreadyLive
	}
	b := &Backend{cfg: cfg, changed: make(chan struct{}), wake: make(chan struct{}, 1), routes: found.routes, notes: found.notes,
		drained: map[topology.DeviceID]bool{}, released: map[topology.DeviceID]bool{}}
	b.id.ID = backendSeq.Add(1)
	b.id.Devices = []string{}
	b.closeCtx, b.closeSignal = context.WithCancel(context.Background())
	devs := make([]topology.DeviceFacts, len(profiles))
	for i, p := range profiles {
		devs[i] = p.Device
		b.id.Devices = append(b.id.Devices, p.Device.ID.String())
	}
	pool, err := newPool(devs, cfg.healthCheck)
	if err != nil { // WithDevices refused repeated GPUs already
		releaseOwner()
		return nil, err
	}
	b.res = &resources{pool: pool, devices: devs}
	for _, p := range profiles {
		rec, err := b.install(p)
		if err == nil {
			b.journal = append(b.journal, p.Device.ID)
			b.installed = append(b.installed, p.Device.ID)
			err = checkRecord(p, rec)
		}
		if err != nil {
			return nil, b.rollback(err)
		}
		b.records = append(b.records, rec)
	}
	return b, nil
}

// defaults fills in the defaults of what no option set and returns the
// profiles of the GPUs of WithDevices.
func (cfg *settings) defaults() []DeviceProfile {
	if cfg.streams == 0 {
		cfg.streams = 1
	}
	if cfg.cleanupSlice == 0 {
		cfg.cleanupSlice = DefaultCleanupSlice
	}
	if cfg.rollbackWait == 0 {
		cfg.rollbackWait = cfg.cleanupSlice
	}
	out := make([]DeviceProfile, len(cfg.devices))
	for i, d := range cfg.devices {
		out[i] = DeviceProfile{Device: d, Streams: cfg.streams}
	}
	return out
}

// install runs the Install hook, turning a panic into an error.
func (b *Backend) install(p DeviceProfile) (rec StartupRecord, err error) {
	if b.cfg.hooks.Install == nil {
		d := p.Device
		return StartupRecord{Device: d.ID.String(), UUID: d.UUID, Name: d.Name, Vendor: d.Vendor, MemoryBytes: d.MemoryBytes,
			Streams: p.Streams, Runtime: b.runtimeOf(d.ID)}, nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("lease: install %v: panic: %v", p.Device.ID, r)
		}
	}()
	rec, err = b.cfg.hooks.Install(context.Background(), p)
	if err != nil {
		err = fmt.Errorf("lease: install %v: %w", p.Device.ID, err)
	}
	return rec, err
}

func checkRecord(p DeviceProfile, r StartupRecord) error {
	var bad []string
	if r.Device != p.Device.ID.String() {
		bad = append(bad, fmt.Sprintf("device %q", r.Device))
	}
	if p.Device.UUID != "" && r.UUID != p.Device.UUID {
		bad = append(bad, fmt.Sprintf("UUID %q, want %q", r.UUID, p.Device.UUID))
	}
	if r.Streams != p.Streams {
		bad = append(bad, fmt.Sprintf("%d streams, want %d", r.Streams, p.Streams))
	}
	if bad != nil {
		return fmt.Errorf("lease: startup record of %v does not match its profile: %s", p.Device.ID, strings.Join(bad, "; "))
	}
	return nil
}

// rollback hands a half-built backend to its close coordinator and waits
// up to RollbackWait for GPU-resource quiescence.
func (b *Backend) rollback(cause error) error {
	ce := &ConstructionError{Err: cause, Rollback: RollbackCleanup{Installed: len(b.installed)}}
	_ = b.Close() // the first call: nobody else holds b yet
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.rollbackWait)
	defer cancel()
	for {
		b.mu.Lock()
		quiet, failed, ch := b.gpuQuiet, b.failed != nil, b.changed
		b.mu.Unlock()
		switch {
		case failed:
			ce.Rollback.Failed = true
			return ce
		case quiet:
			ce.Rollback.Finished = true
			return ce
		}
		select {
		case <-ch:
		case <-ctx.Done():
			ce.Rollback.Transferred = true
			return ce
		}
	}
}

// Identity returns the backend's identity. It works at any time.
func (b *Backend) Identity() Identity {
	id := b.id
	id.Devices = append([]string{}, id.Devices...)
	return id
}

// StartupRecords returns one record per leasable device (GPU or OpenCL
// device), in slot order, as checked by New. It works at any time.
func (b *Backend) StartupRecords() []StartupRecord {
	return append([]StartupRecord{}, b.records...)
}

// NumGPUs returns the number of devices the backend leases: its GPUs and
// OpenCL devices (0 on a host with none). It works at any time.
func (b *Backend) NumGPUs() int { return len(b.records) }

// Devices returns the leasable devices of the backend's resource
// generation (GPUs and OpenCL devices), in slot order (a service read). After Close it returns ErrBackendClosing. The
// CPUAffinity slices are shared: do not modify them.
func (b *Backend) Devices() ([]topology.DeviceFacts, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing {
		b.m.serviceRefused++
		b.m.gen++
		return nil, ErrBackendClosing
	}
	return append([]topology.DeviceFacts{}, b.res.devices...), nil
}

// Claim admits one unit of device work: it waits FIFO for a lease on a
// free device (GPU or OpenCL device) of the backend's pool (see
// Pool.Claim) and holds a GPU permit until the returned Claim is
// released, so close waits for it. It opens nothing (Acquire does).
//
// Errors: ErrBackendClosing when close has been signalled before or while
// waiting (a claim parked at close is woken and refused); ErrNoGPU at
// once when the backend has no device to lease (fall back to the CPU
// device), and wrapping each *gpu.LostError once WithHealthCheck has
// found every GPU gone; ctx.Err(), at once when ctx is already done (no
// lease is taken, nothing is counted), or when it is done while waiting.
func (b *Backend) Claim(ctx context.Context) (*Claim, error) {
	b.mu.Lock()
	if b.closing {
		b.m.admissionsRefused++
		b.m.gen++
		b.mu.Unlock()
		return nil, ErrBackendClosing
	}
	pool := b.res.pool
	b.mu.Unlock()
	if pool.Capacity() == 0 {
		return nil, ErrNoGPU
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(b.closeCtx, cancel)
	l, err := pool.Claim(wctx)
	stop()
	cancel()
	if err != nil {
		if ctx.Err() == nil && b.closeCtx.Err() != nil {
			b.mu.Lock()
			b.m.admissionsRefused++
			b.m.gen++
			b.mu.Unlock()
			return nil, ErrBackendClosing
		}
		return nil, err
	}
	b.mu.Lock()
	if b.closing {
		b.m.admissionsRefused++
		b.m.gen++
		b.mu.Unlock()
		l.Release()
		return nil, ErrBackendClosing
	}
	b.m.gpuPermits++
	b.m.admissions++
	b.m.gen++
	b.mu.Unlock()
	l.after = b.releaseGPUPermit
	return l, nil
}

func (b *Backend) releaseGPUPermit() {
	b.mu.Lock()
	b.m.gpuPermits--
	b.m.gen++
	b.notifyLocked()
	b.mu.Unlock()
}

// notifyLocked wakes every waiter and the coordinator. b.mu is held.
func (b *Backend) notifyLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Close signals close without waiting. It returns nil to the one caller
// that wins the lifecycle gate and ErrBackendClosing to every later call
// (from any goroutine), which changes nothing; so errors.Is(err,
// ErrBackendClosing) means "close was already signalled", not a failure.
// Close never fails otherwise: what the cleanup does is reported by
// CloseAndWait and CloseSnapshot. The winner starts the close coordinator
// goroutine, which runs the cleanup in bounded slices in this phase
// order: (1) service: drain each GPU's service pools (Hooks.Drain); (2)
// journal: the construction journal lets go of the installed resources;
// (3) gpu_permits: wait until no GPU permit (claim from Backend.Claim) is
// held, then release every GPU's resources in reverse install order
// (Hooks.Release), drop the resource generation and free the owner lease
// (GPU-resource quiescence: a new backend may now be built); (4)
// observation: wait until every begun attempt has finished (observation
// quiescence).
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing {
		return ErrBackendClosing
	}
	b.closing = true
	b.phase = phaseService
	b.m.gen++
	b.closeSignal()
	b.workerDone = make(chan struct{})
	go b.coordinate(b.workerDone)
	b.notifyLocked()
	return nil
}

// coordinate is the close coordinator: it owns the cleanup.
func (b *Backend) coordinate(done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(b.cfg.cleanupSlice)
	defer tick.Stop()
	for {
		b.mu.Lock()
		ph := b.phase
		b.mu.Unlock()
		if ph >= phaseDone {
			return
		}
		ok, err := b.step(ph)
		b.mu.Lock()
		if err != nil {
			b.failed = fmt.Errorf("lease: cleanup phase %s: %w", phaseNames[ph], err)
			b.m.gen++
			b.notifyLocked()
			b.mu.Unlock()
			return // fail closed: resources leaked, owner lease kept
		}
		if ok {
			if b.timedOut[ph] {
				b.late++
			}
			b.phase = ph + 1
			b.m.gen++
			b.notifyLocked()
			b.mu.Unlock()
			continue
		}
		b.mu.Unlock()
		select {
		case <-b.wake:
		case <-tick.C:
		}
	}
}

// step does one bounded slice of phase ph and reports whether the phase
// is complete.
func (b *Backend) step(ph phase) (bool, error) {
	switch ph {
	case phaseService:
		return b.eachDevice(false, b.cfg.hooks.Drain, b.drained)
	case phaseJournal:
		b.mu.Lock()
		b.journal = nil
		b.mu.Unlock()
		return true, nil
	case phaseGPUPermits:
		b.mu.Lock()
		busy := b.m.gpuPermits > 0
		b.mu.Unlock()
		if busy {
			return false, nil
		}
		ok, err := b.eachDevice(true, b.cfg.hooks.Release, b.released)
		if !ok || err != nil {
			return ok, err
		}
		b.mu.Lock()
		b.res = nil // drop the resource generation
		b.gpuQuiet = true
		b.mu.Unlock()
		releaseOwner()
		return true, nil
	case phaseObservation:
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.m.obsPermits > 0 {
			return false, nil
		}
		b.obsQuiet = true
		return true, nil
	}
	return true, nil
}

// eachDevice calls hook once per GPU not yet in done (in reverse slot
// order when reverse), each with a slice-bounded ctx. Only installed
// devices are visited: in a rollback, those of the construction journal.
func (b *Backend) eachDevice(reverse bool, hook func(context.Context, topology.DeviceID) error, done map[topology.DeviceID]bool) (bool, error) {
	b.mu.Lock()
	ids := b.installedLocked()
	b.mu.Unlock()
	if hook == nil {
		return true, nil
	}
	all := true
	for k := range ids {
		id := ids[k]
		if reverse {
			id = ids[len(ids)-1-k]
		}
		if done[id] {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.cleanupSlice)
		err := callHook(ctx, hook, id)
		cancel()
		switch {
		case err == nil:
			done[id] = true
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
			all = false
		default:
			return false, fmt.Errorf("%v: %w", id, err)
		}
	}
	return all, nil
}

// installedLocked returns the IDs of the GPUs whose install succeeded,
// in install order. b.mu is held.
func (b *Backend) installedLocked() []topology.DeviceID {
	return append([]topology.DeviceID(nil), b.installed...)
}

func callHook(ctx context.Context, hook func(context.Context, topology.DeviceID) error, id topology.DeviceID) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return hook(ctx, id)
}

// CloseSnapshot returns the close progress now. It works at any time,
// also before Close and from inside an observer.
func (b *Backend) CloseSnapshot() CloseSnapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closeSnapshotLocked()
}

func (b *Backend) closeSnapshotLocked() CloseSnapshot {
	s := CloseSnapshot{Closing: b.closing, GPUResourceQuiescent: b.gpuQuiet, ObservationQuiescent: b.obsQuiet,
		ActiveGPUPermits: b.m.gpuPermits, ActiveObservationPermits: b.m.obsPermits, CleanupFailed: b.failed != nil,
		CleanupDeadlineElapsedCount: b.deadlines, CleanupLateSuccessCount: b.late, Phase: phaseNames[b.phase]}
	if b.failed != nil {
		s.Phase = "failed"
	}
	return s
}

// CloseAndWait signals close (as Close) and waits until both quiescence
// scopes are reached, cleanup fails, or ctx is done. It returns the close
// snapshot at that moment and:
//   - nil when both scopes are quiescent;
//   - a *CloseError with Reason ErrBackendCloseTimeout (and ctx's error)
//     when ctx is done first; the pending phase counts as deadline-elapsed
//     and the cleanup goes on (a later completion counts as a late
//     success; a later call can observe it);
//   - a *CloseError with Reason ErrCleanupFailedClosed when a phase
//     failed; the owner lease stays claimed for the life of the process;
//   - ErrReentrantObservationClose, before close is signalled, when ctx
//     is (or derives from) the ctx an observer callback was given (see
//     WithObserver).
//
// Any number of goroutines may wait at once.
func (b *Backend) CloseAndWait(ctx context.Context) (CloseSnapshot, error) {
	if ctx.Value(observationKey{}) == b {
		return b.CloseSnapshot(), ErrReentrantObservationClose
	}
	_ = b.Close() // signalled here or before: either way, wait
	for {
		b.mu.Lock()
		s, failed, ch, done := b.closeSnapshotLocked(), b.failed, b.changed, b.workerDone
		b.mu.Unlock()
		if failed != nil {
			<-done
			return s, &CloseError{Reason: ErrCleanupFailedClosed, Err: failed, Snapshot: s}
		}
		if s.GPUResourceQuiescent && s.ObservationQuiescent {
			<-done // the coordinator is about to exit: no goroutine outlives the wait
			return s, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			b.mu.Lock()
			if b.failed == nil && b.phase < phaseDone && !b.timedOut[b.phase] {
				b.timedOut[b.phase] = true
				b.deadlines++
				b.m.gen++
			}
			s = b.closeSnapshotLocked()
			b.mu.Unlock()
			return s, &CloseError{Reason: ErrBackendCloseTimeout, Err: ctx.Err(), Snapshot: s}
		}
	}
}

// CloseAndWaitUntil is CloseAndWait under ctx against an absolute
// deadline, with CloseAndWait's errors (a *CloseError with
// ErrBackendCloseTimeout when the deadline comes first).
func (b *Backend) CloseAndWaitUntil(ctx context.Context, deadline time.Time) (CloseSnapshot, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return b.CloseAndWait(ctx)
}

// MetricsSnapshot is one coherent pull snapshot of a backend: every
// counter and the close facts were read under one lock, and Generation
// increases with every change to any of them (so two snapshots with the
// same Generation show the same state). Leases and PendingClaimers come
// from the pool's atomics and are best-effort. It marshals to JSON.
type MetricsSnapshot struct {
	Generation        uint64          `json:"generation"`            // increases with every change
	Backend           Identity        `json:"backend"`               // which backend
	StartupRecords    []StartupRecord `json:"startup_records"`       // one per GPU, in slot order
	Admissions        uint64          `json:"admissions"`            // leases granted by Claim
	AdmissionsRefused uint64          `json:"admissions_refused"`    // Claim refused with ErrBackendClosing
	ServiceRefused    uint64          `json:"service_reads_refused"` // Devices refused with ErrBackendClosing
	AttemptsBegun     uint64          `json:"attempts_begun"`        // BeginAttempt calls that succeeded
	AttemptsFinished  uint64          `json:"attempts_finished"`     // Finish calls, whatever their error, after the report's delivery
	AttemptsFailed    uint64          `json:"attempts_failed"`       // finished with an error other than ErrBackendClosing
	AttemptsUnplanned uint64          `json:"attempts_unplanned"`    // finished with an error wrapping ErrBackendClosing
	AttemptsRefused   uint64          `json:"attempts_refused"`      // BeginAttempt refused: not counted as begun
	Leases            []SlotState     `json:"leases"`                // one per slot, in slot order
	PendingClaimers   int             `json:"pending_claimers"`      // as Pool.PendingClaimers
	Close             CloseSnapshot   `json:"close"`                 // as Backend.CloseSnapshot
	// ProcessConfig is the process configuration recorded with
	// SetProcessConfig (the I/O layer's settings in force, say), by
	// component.
	ProcessConfig map[string]string `json:"process_config,omitempty"`
}

// SetProcessConfig records the configuration a component of the process
// runs with (e.g. "kvio": the compat mode, threads, task size and
// thresholds in force), so that metrics snapshots report it. Safe for
// concurrent use; a later call for the same component replaces it.
func (b *Backend) SetProcessConfig(component, config string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.procConfig == nil {
		b.procConfig = map[string]string{}
	}
	b.procConfig[component] = config
	b.m.gen++
}

// MetricsSnapshot returns the backend's metrics. It works at any time,
// also after the GPU resources are released (Leases is then empty).
func (b *Backend) MetricsSnapshot() MetricsSnapshot {
	b.mu.Lock()
	m := MetricsSnapshot{Generation: b.m.gen, Backend: b.Identity(), StartupRecords: b.StartupRecords(), ProcessConfig: maps.Clone(b.procConfig),
		Admissions: b.m.admissions, AdmissionsRefused: b.m.admissionsRefused, ServiceRefused: b.m.serviceRefused,
		AttemptsBegun: b.m.attemptsBegun, AttemptsFinished: b.m.attemptsFinished, AttemptsFailed: b.m.attemptsFailed,
		AttemptsUnplanned: b.m.attemptsUnplanned, AttemptsRefused: b.m.attemptsRefused, Close: b.closeSnapshotLocked()}
	res := b.res
	b.mu.Unlock()
	m.Leases = []SlotState{}
	if res != nil {
		m.Leases = res.pool.SnapshotLeases()
		m.PendingClaimers = res.pool.PendingClaimers()
	}
	return m
}

// observationKey marks the ctx of an observer callback: its value is
// the backend that delivers the report (see WithObserver).
type observationKey struct{}
