package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/semaphore"

	"github.com/streamdag/streamdag/topology"
)

// ErrNoGPU is returned at once by Pool.Claim (and Backend.Claim) on a host
// or backend with no GPU: the caller falls back to the CPU device. It is
// never returned after a wait.
var ErrNoGPU = errors.New("gpu: no GPU on this host")

// Pool hands out exclusive leases on GPUs: one slot per GPU, at most one
// lease per slot. It follows the seed GpuPool (shared/seeds/GpuPool.txt,
// NOTES.md section 2): a FIFO counting semaphore with one permit per slot
// (golang.org/x/sync/semaphore.Weighted, whose waiters are served in
// arrival order and whose TryAcquire fails while any waiter is queued),
// plus one atomic "free" flag per slot. Holding a permit guarantees that at
// least one slot is free, because a lease frees its slot before it returns
// its permit.
//
// A Pool with no slot (a CPU-only host) is valid: Claim returns ErrNoGPU at
// once and never queues. The zero Pool is such an empty pool. All methods
// are safe for concurrent use; a Pool starts no goroutine and needs no
// Close.
type Pool struct {
	slots   []poolSlot
	sem     *semaphore.Weighted // nil when len(slots) == 0
	pending atomic.Int64
}

type poolSlot struct {
	dev  topology.Device
	free atomic.Bool
}

// NewPool returns a pool with one slot per GPU of devices, in the order
// given (slot i is the i-th GPU). Entries that are not GPUs (the CPU
// device, as Inventory.Devices holds first) are skipped, so passing
// Inventory.Devices as is works. Device indices are kept as they are, so
// they may be sparse (gpu0, gpu2, gpu5). A nil or GPU-less devices gives
// an empty pool. The devices are copied. O(len(devices)).
//
// Errors: a GPU ID given twice ("gpu: NewPool: gpu2 given twice (entries
// 1 and 2)", entries counted from 0 in devices); no pool is returned.
func NewPool(devices []topology.Device) (*Pool, error) {
	p := &Pool{}
	seen := map[topology.DeviceID]int{}
	for i, d := range devices {
		if d.ID.Kind != topology.KindGPU {
			continue
		}
		if j, ok := seen[d.ID]; ok {
			return nil, fmt.Errorf("gpu: NewPool: %v given twice (entries %d and %d)", d.ID, j, i)
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
	return p, nil
}

// Capacity returns the number of slots (GPUs) of the pool; 0 on a CPU-only
// host.
func (p *Pool) Capacity() int { return len(p.slots) }

// PendingClaimers returns how many Claim calls are parked waiting for a
// permit right now. A claim that is cancelled while parked stops counting
// when its Claim returns. TryClaim never counts. The value is momentary: a
// dispatcher that wants to leave spare GPUs to blocked claimers reads it
// before each TryClaim ("claimers first", as in the seed).
func (p *Pool) PendingClaimers() int { return int(p.pending.Load()) }

// Claim returns a lease on a free GPU, waiting in FIFO order (first parked,
// first served) while every GPU is leased.
//
// Errors: ErrNoGPU at once when the pool has no slot; ctx.Err() at once
// when ctx is already done, even with a GPU free (as
// semaphore.Weighted.Acquire), and when ctx is done before a permit is
// granted; either way the pool is left unchanged (a permit granted at the
// same moment is handed back to the next waiter). The returned lease must
// be released with Lease.Release.
func (p *Pool) Claim(ctx context.Context) (*Lease, error) {
	if len(p.slots) == 0 {
		return nil, ErrNoGPU
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if l, ok := p.TryClaim(); ok {
		return l, nil
	}
	p.pending.Add(1)
	err := p.sem.Acquire(ctx, 1)
	p.pending.Add(-1)
	if err != nil {
		return nil, err
	}
	return p.take()
}

// TryClaim returns a lease on a free GPU without waiting, and true; or nil
// and false when the pool has no slot, every GPU is leased, or a Claim is
// parked (a permit released while a Claim waits is owed to that waiter and
// is never taken here). It does not change PendingClaimers.
func (p *Pool) TryClaim() (*Lease, bool) {
	if len(p.slots) == 0 || !p.sem.TryAcquire(1) {
		return nil, false
	}
	l, err := p.take()
	return l, err == nil
}

// errPoolInvariant reports a permit without a free slot: a bug in Pool.
var errPoolInvariant = errors.New("gpu: pool invariant broken: permit held but no free slot")

// take turns a held permit into a lease on the first free slot.
func (p *Pool) take() (*Lease, error) {
	for i := range p.slots {
		if p.slots[i].free.CompareAndSwap(true, false) {
			return &Lease{pool: p, slot: i}, nil
		}
	}
	// Unreachable while leases free their slot before their permit; the
	// seed panics here, this returns the permit and an error instead.
	p.sem.Release(1)
	return nil, errPoolInvariant
}

// LeaseEntry is one slot of Pool.SnapshotLeases.
type LeaseEntry struct {
	// Slot is the slot's position in the pool, 0 <= Slot < Capacity.
	Slot int `json:"slot"`
	// Device is the GPU's ID, e.g. "gpu5" (indices may be sparse).
	Device string `json:"device"`
	// Index is the GPU's inventory (NVML) index.
	Index int `json:"index"`
	// Name is the GPU's name, e.g. "NVIDIA H100 80GB HBM3".
	Name string `json:"name"`
	// Leased is true while a lease holds the slot.
	Leased bool `json:"leased"`
}

// SnapshotLeases returns one entry per slot, in slot order (the order
// NewPool saw the GPUs), so indices match every other report made from the
// same inventory. Each flag is read atomically but the whole is not a
// transaction: it is best-effort observability. Empty (non-nil) for a
// CPU-only pool.
func (p *Pool) SnapshotLeases() []LeaseEntry {
	out := make([]LeaseEntry, len(p.slots))
	for i := range p.slots {
		s := &p.slots[i]
		out[i] = LeaseEntry{Slot: i, Device: s.dev.ID.String(), Index: s.dev.ID.Index, Name: s.dev.Name, Leased: !s.free.Load()}
	}
	return out
}

// Lease is the exclusive use of one GPU of a Pool until Release. A Lease is
// safe for concurrent use.
type Lease struct {
	pool     *Pool
	slot     int
	released atomic.Bool
	// after, when set (by a Backend, before the lease is shared), runs
	// once after the permit is returned.
	after func()
}

// Device returns the leased GPU's facts (also after Release). The
// CPUAffinity slice is shared: do not modify it.
func (l *Lease) Device() topology.Device { return l.pool.slots[l.slot].dev }

// Slot returns the lease's slot in its pool.
func (l *Lease) Slot() int { return l.slot }

// Release frees the slot and then returns the permit, so the waiter it
// wakes always finds a free slot. It is idempotent: only the first call
// (from any goroutine) does anything; it reports whether this call
// released the lease. Release on a nil *Lease returns false.
func (l *Lease) Release() bool {
	if l == nil || !l.released.CompareAndSwap(false, true) {
		return false
	}
	l.pool.slots[l.slot].free.Store(true)
	l.pool.sem.Release(1)
	if l.after != nil {
		l.after()
	}
	return true
}
