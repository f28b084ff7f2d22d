package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"golang.org/x/sync/semaphore"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// ErrNoGPU is returned by Pool.Claim (and Backend.Claim) when there is no
// GPU to wait for: at once on a host or backend with no GPU, and, wrapped
// with the *gpu.LostError of each GPU, once every GPU of the pool is lost
// (also to claims parked when the last one is found lost). The caller falls
// back to the CPU device.
var ErrNoGPU = errors.New("lease: no GPU on this host")

// HealthCheck says whether a GPU a claim is about to hand out is still
// there: nil, or an error saying why it is gone for good (a transient or
// unknown state must return nil; a panic counts as nil). It may be called
// from many goroutines at once. gpu/nvml's HealthCheck is the check by
// UUID through NVML.
type HealthCheck func(d topology.DeviceFacts) error

// WithHealthCheck makes every claim re-check the GPU it is about to hand
// out with check. A GPU the check reports
// gone is retired for the life of the pool: it is never leased again,
// SnapshotLeases and Lost say why, and the claim goes on to another GPU,
// waiting for one when all the others are leased. Once every GPU is
// retired, claims fail with ErrNoGPU wrapping each *gpu.LostError.
// Without the option no claim checks. It configures a Pool, and a
// Backend's pool. Errors: a nil check.
func WithHealthCheck(check HealthCheck) Option {
	return func(s *settings) error {
		if check == nil {
			return errors.New("WithHealthCheck: nil check")
		}
		s.healthCheck = check
		return nil
	}
}

// Pool hands out exclusive leases on devices (GPUs and OpenCL devices;
// "GPU" below means either): one slot per device, at most one lease per
// slot. It is a FIFO counting semaphore with one permit per slot
// (golang.org/x/sync/semaphore.Weighted, whose waiters are served in
// arrival order and whose TryAcquire fails while any waiter is queued),
// plus one atomic "free" flag per slot. Holding a permit guarantees that
// at least one slot is free, because a lease frees its slot before it returns
// its permit.
//
// With a health check (WithHealthCheck) a slot whose GPU is found gone
// is retired: it stays not free and keeps the permit of the claim that
// found it, so the permits still track the usable slots. When the last
// usable slot is retired its permit is returned instead, and every claim
// that takes it finds no usable slot, returns it again and fails.
//
// A Pool with no slot (a CPU-only host) is valid: Claim returns ErrNoGPU at
// once and never queues. The zero Pool is such an empty pool. All methods
// are safe for concurrent use; a Pool starts no goroutine and needs no
// Close.
type Pool struct {
	slots   []poolSlot
	sem     *semaphore.Weighted // nil when len(slots) == 0
	pending atomic.Int64
	check   HealthCheck
	usable  atomic.Int64 // slots not retired
}

type poolSlot struct {
	dev  topology.DeviceFacts
	free atomic.Bool
	lost atomic.Pointer[gpu.LostError] // set once, when the slot is retired
}

// NewPool returns a pool with one slot per leasable device of devices (a
// GPU, an OpenCL device), in the order given (slot i is the i-th such
// device). The CPU device (which gpu/nvml's Inventory.Devices holds
// first) is skipped, so passing an inventory's Devices as is works.
// Device indices are kept as they are, so they may be sparse (gpu0, gpu2,
// gpu5). A nil devices, or one with only the CPU device, gives an empty
// pool. The devices are copied. O(len(devices)).
//
// Errors: a GPU ID given twice ("lease: NewPool: gpu2 given twice (entries
// 1 and 2)", entries counted from 0 in devices); an option's error, or an
// option that configures only a Backend ("lease: NewPool: WithStreams
// configures a Backend, not a Pool"); no pool is returned.
func NewPool(devices []topology.DeviceFacts, opts ...Option) (*Pool, error) {
	cfg, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	if cfg.backendOnly != "" {
		return nil, fmt.Errorf("lease: NewPool: %s configures a Backend, not a Pool", cfg.backendOnly)
	}
	return newPool(devices, cfg.healthCheck)
}

// newPool is NewPool with its health check (nil: none).
func newPool(devices []topology.DeviceFacts, check HealthCheck) (*Pool, error) {
	p := &Pool{check: check}
	seen := map[topology.DeviceID]int{}
	for i, d := range devices {
		if d.ID.Kind == topology.KindCPU {
			continue
		}
		if j, ok := seen[d.ID]; ok {
			return nil, fmt.Errorf("lease: NewPool: %v given twice (entries %d and %d)", d.ID, j, i)
		}
		seen[d.ID] = i
		d.CPUAffinity = append([]int(nil), d.CPUAffinity...)
		p.slots = append(p.slots, poolSlot{dev: d})
	}
	p.slots = p.slots[:len(p.slots):len(p.slots)]
	for i := range p.slots {
		p.slots[i].free.Store(true)
	}
	if len(p.slots) > 0 {
		p.sem = semaphore.NewWeighted(int64(len(p.slots)))
	}
	p.usable.Store(int64(len(p.slots)))
	return p, nil
}

// Capacity returns the number of slots (GPUs) of the pool, retired ones
// included; 0 on a CPU-only host.
func (p *Pool) Capacity() int { return len(p.slots) }

// Lost returns (a copy of) the gpu.LostError of every retired slot, in slot
// order; nil when none is.
func (p *Pool) Lost() []gpu.LostError {
	var out []gpu.LostError
	for i := range p.slots {
		if le := p.slots[i].lost.Load(); le != nil {
			out = append(out, *le)
		}
	}
	return out
}

// PendingClaimers returns how many Claim calls are parked waiting for a
// permit right now. A claim that is cancelled while parked stops counting
// when its Claim returns. TryClaim never counts. The value is momentary: a
// dispatcher that wants to leave spare GPUs to blocked claimers reads it
// before each TryClaim ("claimers first").
func (p *Pool) PendingClaimers() int { return int(p.pending.Load()) }

// Claim returns a lease on a free GPU, waiting in FIFO order (first parked,
// first served) while every GPU is leased. With a health check, a claim
// that finds the GPU it took gone retires it and goes on (to the back of
// the queue when it must wait again).
//
// Errors: ErrNoGPU at once when the pool has no slot, and wrapping each
// *gpu.LostError once every GPU is lost (see WithHealthCheck); ctx.Err() at once
// when ctx is already done, even with a GPU free (as
// semaphore.Weighted.Acquire), and when ctx is done before a permit is
// granted; either way the pool is left unchanged (a permit granted at the
// same moment is handed back to the next waiter). The returned lease must
// be released with Claim.Release.
func (p *Pool) Claim(ctx context.Context) (*Claim, error) {
	if len(p.slots) == 0 {
		return nil, ErrNoGPU
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for {
		if p.usable.Load() == 0 {
			return nil, p.allLost()
		}
		l, err := p.tryClaim()
		if err == nil {
			return l, nil
		}
		if err != errNoPermit {
			return nil, err
		}
		p.pending.Add(1)
		err = p.sem.Acquire(ctx, 1)
		p.pending.Add(-1)
		if err != nil {
			return nil, err
		}
		if l, err = p.take(); err != errRetired {
			return l, err
		}
	}
}

// TryClaim returns a lease on a free GPU without waiting, and true; or nil
// and false when the pool has no slot, every GPU is leased or lost, or a
// Claim is parked (a permit released while a Claim waits is owed to that
// waiter and is never taken here). It does not change PendingClaimers.
func (p *Pool) TryClaim() (*Claim, bool) {
	if len(p.slots) == 0 {
		return nil, false
	}
	l, err := p.tryClaim()
	return l, err == nil
}

// tryClaim takes a permit without waiting and turns it into a lease,
// retrying while it only finds GPUs that are gone. It returns
// errNoPermit when no permit is free for it.
func (p *Pool) tryClaim() (*Claim, error) {
	for p.sem.TryAcquire(1) {
		if l, err := p.take(); err != errRetired {
			return l, err
		}
	}
	return nil, errNoPermit
}

var (
	// errPoolInvariant reports a permit without a free slot: a bug in Pool.
	errPoolInvariant = errors.New("lease: pool invariant broken: permit held but no free slot")
	// errRetired: take found its slot gone and retired it, keeping the
	// permit; the claim needs another.
	errRetired = errors.New("lease: slot retired")
	// errNoPermit: tryClaim found no permit free for it.
	errNoPermit = errors.New("lease: no permit free")
)

// take turns a held permit into a lease on the first free slot whose GPU
// passes the health check. A slot that fails it is retired and keeps the
// permit (errRetired), unless it was the last usable one: then the permit
// is returned, so parked claims wake and fail too.
func (p *Pool) take() (*Claim, error) {
	for i := range p.slots {
		s := &p.slots[i]
		if !s.free.CompareAndSwap(true, false) {
			continue
		}
		if p.check != nil {
			if err := p.checkSlot(s.dev); err != nil {
				var le *gpu.LostError
				if !errors.As(err, &le) {
					le = &gpu.LostError{Device: s.dev.ID, UUID: s.dev.UUID, Err: err}
				}
				s.lost.Store(le)
				if p.usable.Add(-1) == 0 {
					p.sem.Release(1)
					return nil, p.allLost()
				}
				return nil, errRetired
			}
		}
		return &Claim{pool: p, slot: i}, nil
	}
	p.sem.Release(1)
	if p.usable.Load() == 0 {
		return nil, p.allLost()
	}
	// Unreachable while leases free their slot before their permit; if it
	// is reached, the permit is returned and the claim fails with an error.
	return nil, errPoolInvariant
}

// checkSlot runs the health check; a panic in it counts as "not known to
// be gone", so the pool's permits and slots stay consistent.
func (p *Pool) checkSlot(d topology.DeviceFacts) (err error) {
	defer func() {
		if recover() != nil {
			err = nil
		}
	}()
	return p.check(d)
}

// allLost is the error of a claim once every slot is retired.
func (p *Pool) allLost() error {
	e := &allLostError{}
	for _, le := range p.Lost() {
		e.lost = append(e.lost, &le)
	}
	return e
}

// allLostError matches ErrNoGPU, gpu.ErrDeviceLost and each *gpu.LostError.
type allLostError struct{ lost []*gpu.LostError }

// maxListed bounds the GPUs an error message names.
const maxListed = 4

func (e *allLostError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lease: no GPU left: all %d GPUs of the pool are lost: ", len(e.lost))
	for i, le := range e.lost {
		if i == maxListed {
			fmt.Fprintf(&b, "; and %d more", len(e.lost)-maxListed)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(strings.TrimPrefix(le.Error(), "gpu: "))
	}
	return b.String()
}

func (e *allLostError) Unwrap() []error {
	out := []error{ErrNoGPU}
	for _, le := range e.lost {
		out = append(out, le)
	}
	return out
}

// SlotState is one slot of Pool.SnapshotLeases.
type SlotState struct {
	// Slot is the slot's position in the pool, 0 <= Slot < Capacity.
	Slot int `json:"slot"`
	// Device is the device's ID, e.g. "gpu5" (indices may be sparse) or
	// "opencl0".
	Device string `json:"device"`
	// Index is the device's index: a GPU's inventory (NVML) index, an
	// OpenCL device's index among its driver's devices.
	Index int `json:"index"`
	// Name is the device's name, e.g. "NVIDIA H100 80GB HBM3".
	Name string `json:"name"`
	// Vendor is the device's vendor as its driver names it; "" when
	// unknown.
	Vendor string `json:"vendor,omitempty"`
	// Leased is true while a lease holds the slot.
	Leased bool `json:"leased"`
	// Lost says why the slot's GPU is retired (the *gpu.LostError's text);
	// "" while it is usable. A retired slot is never Leased.
	Lost string `json:"lost,omitempty"`
}

// SnapshotLeases returns one entry per slot, in slot order (the order
// NewPool saw the GPUs), so indices match every other report made from the
// same inventory. Each flag is read atomically but the whole is not a
// transaction: it is best-effort observability. Empty (non-nil) for a
// CPU-only pool.
func (p *Pool) SnapshotLeases() []SlotState {
	out := make([]SlotState, len(p.slots))
	for i := range p.slots {
		s := &p.slots[i]
		out[i] = SlotState{Slot: i, Device: s.dev.ID.String(), Index: s.dev.ID.Index, Name: s.dev.Name, Vendor: s.dev.Vendor}
		if le := s.lost.Load(); le != nil {
			out[i].Lost = le.Error()
		} else {
			out[i].Leased = !s.free.Load()
		}
	}
	return out
}

// Claim is a lease: the exclusive use of one device of a Pool until
// Release. A Claim is safe for concurrent use.
type Claim struct {
	pool     *Pool
	slot     int
	released atomic.Bool
	// after, when set (by a Backend, before the lease is shared), runs
	// once after the permit is returned.
	after func()
}

// Device returns the leased device's facts (also after Release). The
// CPUAffinity slice is shared: do not modify it.
func (c *Claim) Device() topology.DeviceFacts { return c.pool.slots[c.slot].dev }

// Slot returns the claim's slot in its pool, 0 <= Slot < Capacity.
func (c *Claim) Slot() int { return c.slot }

// Release frees the slot and then returns the permit, so the waiter it
// wakes always finds a free slot. It is idempotent: only the first call
// (from any goroutine) does anything; it reports whether this call
// released the lease. Release on a nil *Claim returns false.
func (c *Claim) Release() bool {
	if c == nil || !c.released.CompareAndSwap(false, true) {
		return false
	}
	c.pool.slots[c.slot].free.Store(true)
	c.pool.sem.Release(1)
	if c.after != nil {
		c.after()
	}
	return true
}
