package opencl

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/streamdag/streamdag/gpu"
)

// BaseAlignForTest returns the base address alignment (bytes) of an
// OpenCL gpu.Device made by NewDevice.
func BaseAlignForTest(d gpu.Device) int64 { return d.(*clDevice).align }

// HoldForTest makes the commands enqueued on s after it wait for a user
// event; fail completes that event with the OpenCL status st (0: success,
// negative: failed, as a failed command would leave it) and releases it.
func HoldForTest(s gpu.Stream) (fail func(st int32) error, err error) {
	cs := s.(*clStream)
	u, err := cs.d.ctx.NewUserEvent()
	if err != nil {
		return nil, err
	}
	cs.mu.Lock()
	err = cs.q.Wait(u.Event())
	cs.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return func(st int32) error {
		var err error
		if st != 0 {
			err = u.SetStatusForTest(st)
		}
		_ = u.Complete(nil)
		u.Event().Release()
		return err
	}, nil
}

// ReportForTest passes err to d as the queues' waiter would report it
// in a marker's Err, and returns the event error d makes of it.
func ReportForTest(d gpu.Device, err error) error {
	out := d.(*clDevice).failures(err, nil)
	return errors.Join(out...)
}

// SlabMaxForTest is the most bytes of memory carved from a slab (and
// zeroed by the slab's zero kernel); larger memory is a buffer of its
// own, filled one command each.
const SlabMaxForTest = slabMaxBytes

// SeqForTest returns the sequence number on its queue of an event that
// a stream of an OpenCL device recorded.
func SeqForTest(e gpu.Event) uint64 { return e.(*clEvent).m.Seq() }

// RegionForTest names the slab region memory m of an OpenCL device is
// carved from: the slab's number on its device and the region's index,
// and true; false for memory that is a buffer of its own.
func RegionForTest(m gpu.Memory) (slab, region int, ok bool) {
	cm := m.(*clMemory)
	if cm.s == nil {
		return 0, 0, false
	}
	return cm.s.n, cm.r, true
}

// SettleForTest waits until every command enqueued so far on the
// queues of d (its streams' and its fill queue) has finished and been
// seen to by the queues' waiters, so that every region released before
// is free to hand out again.
func SettleForTest(ctx context.Context, d gpu.Device) error {
	var errs []error
	for _, q := range d.(*clDevice).queues {
		errs = append(errs, q.Finish(ctx))
	}
	return errors.Join(errs...)
}

// ZeroRunsMaxForTest is the most run sub-buffers a slab caches for its
// zero kernels.
const ZeroRunsMaxForTest = zeroRuns

// ZeroRunsForTest returns the runs the slab of slab memory m caches
// sub-buffers of for its zero kernels, as [first region, count] in
// region order.
func ZeroRunsForTest(m gpu.Memory) [][2]int {
	cm := m.(*clMemory)
	cm.d.fmu.Lock()
	defer cm.d.fmu.Unlock()
	var runs [][2]int
	for _, r := range cm.s.runs {
		runs = append(runs, [2]int{r.first, r.count})
	}
	slices.SortFunc(runs, func(a, b [2]int) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	return runs
}

// ZeroCountsForTest returns how many run sub-buffers d's slabs have made
// and released (evicted) for their zero kernels, and how many arguments
// have been set on its zero kernels.
func ZeroCountsForTest(d gpu.Device) (made, released, sets uint64) {
	cd := d.(*clDevice)
	cd.fmu.Lock()
	defer cd.fmu.Unlock()
	return cd.zeroMade, cd.zeroReleased, cd.zeroSets
}
