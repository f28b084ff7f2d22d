package opencl

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl/internal/cl"
	"github.com/streamdag/streamdag/topology"
)

// Kind is the driver kind of OpenCL devices: importing this package
// registers its driver under Kind, so gpu.Open(ctx, opencl.Kind, opts...)
// opens every available OpenCL device (see NewDevice), with
// gpu.WithStreams' streams each (without it, DefaultStreams), as "opencl0", "opencl1", … in the
// order Devices lists them. With no OpenCL library the error wraps
// ErrUnavailable; with no platform or no available device, ErrNoPlatform.
// The driver takes no driver settings: one is an error naming its type
// (of Open and of OpenDevice).
const Kind = "opencl"

// DefaultStreams is the number of streams of a device the driver opens
// without gpu.WithStreams.
const DefaultStreams = 4

// MaxStreams bounds the stream count of one device (each stream is an
// OpenCL command queue, a waiter goroutine and a host-task goroutine).
const MaxStreams = 64

// Option configures NewDevice.
type Option func(*deviceOptions) error

type deviceOptions struct {
	streams   int
	index     int
	closeWait time.Duration
}

// WithStreams sets the device's number of streams, n in [1, MaxStreams]
// (default 1). An n outside that range makes NewDevice fail with an
// error naming n.
func WithStreams(n int) Option {
	return func(o *deviceOptions) error {
		if n < 1 || n > MaxStreams {
			return fmt.Errorf("opencl: WithStreams(%d): want 1 to %d streams", n, MaxStreams)
		}
		o.streams = n
		return nil
	}
}

// DefaultCloseWait is how long Close waits for the commands of an
// abandoned device (Abandon) when WithCloseWait does not say.
const DefaultCloseWait = time.Second

// WithCloseWait sets how long Close waits, once the device has been
// abandoned (gpu.Abandoner), for the commands enqueued on it to finish
// before it returns an error (d > 0; default DefaultCloseWait). Close of
// a device that was not abandoned waits for everything enqueued, without
// bound. A d <= 0 makes NewDevice fail.
func WithCloseWait(d time.Duration) Option {
	return func(o *deviceOptions) error {
		if d <= 0 {
			return fmt.Errorf("opencl: WithCloseWait(%v): the wait must be positive", d)
		}
		o.closeWait = d
		return nil
	}
}

// WithIndex sets the device's index n >= 0: its ID is topology.OpenCL(n),
// "openclN". The default is 0. A negative n makes NewDevice fail.
func WithIndex(n int) Option {
	return func(o *deviceOptions) error {
		if n < 0 {
			return fmt.Errorf("opencl: WithIndex(%d): the index must not be negative", n)
		}
		o.index = n
		return nil
	}
}

// NewDevice opens dev (from Platforms, Devices or InfoOf) as a gpu.CodeDevice
// with WithStreams' streams (default 1): one OpenCL context, one
// in-order command queue per stream (with a waiter goroutine) and one
// goroutine per stream that runs its host tasks. Kind and Code are
// "opencl"; Info gives the device's name, vendor, global memory and
// compute units (as Cores). The caller owns the device and must Close it.
// Errors (nothing is left running after one): a bad option (such as a
// stream count outside [1, MaxStreams]), the zero Info, a failed OpenCL call (naming it and its
// status), ErrUnavailable.
//
// Streams are gpu.CodeStreams. LaunchKernel binds the arguments on the
// stream's own kernel object for the entry point (made on the first
// launch of it on the stream), setting only the arguments that differ
// from its previous launch there, and enqueues the NDRange. CopyIn and
// CopyOut are asynchronous: the Go memory stays pinned until the queue's
// waiter has seen the copy complete. Launch and LaunchBatch run host
// tasks in queue order (as cudaLaunchHostFunc): a task runs on the
// stream's host goroutine once every command enqueued before it has
// completed, and commands enqueued after it wait for it to return. A
// panicking task is recovered; the stream's next Synchronize returns it
// as a *gpu.PanicError.
//
// Record returns an event over a marker. Its Wait returns nil or the
// failures the device reported for the commands enqueued on the stream
// since the previous Record (and through Stream.Wait, the failures the
// waited events report), each a *gpu.CommandError whose Err names the
// OpenCL command and its failed status ("opencl: pthread-…: queue 1
// command 7 (launch vadd) failed: CL_OUT_OF_RESOURCES (-5)"), whose Seq
// is the sequence number the command's enqueue returned, and whose
// Label is the command's (KernelLaunch.Label,
// "copy in", "copy out", "copy", "fill"), joined: each failure is
// reported by one event of its stream, so wait on every event recorded
// to see them all. Stream.Wait on an event of the same device enqueues a
// marker with a wait list (no host thread blocks); on any other gpu.Event
// it enqueues a wait on a user event that a goroutine completes when the
// event fires (carrying its failures). Close waits for everything
// enqueued, including those bridged events; no goroutine outlives it,
// unless the device was abandoned (Abandon, see Close).
func NewDevice(dev Info, opts ...Option) (gpu.CodeDevice, error) {
	o := deviceOptions{streams: 1, closeWait: DefaultCloseWait}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if dev.d.IsZero() {
		return nil, errors.New("opencl: new device: the zero Info names no device (take one from Platforms, Devices or InfoOf)")
	}
	c, err := cl.Open(dev.d)
	if err != nil {
		return nil, err
	}
	info := dev.d.Info() // the handle's own description, not fields a caller may have set
	d := &clDevice{
		id:    topology.OpenCL(o.index),
		dev:   describe(dev.d),
		align: info.BaseAlignBytes,
		ctx:   c,
		info: topology.DeviceFacts{ID: topology.OpenCL(o.index), Name: info.Name, Vendor: info.Vendor,
			MemoryBytes: info.GlobalMemBytes, NUMANode: -1, Cores: info.ComputeUnits},
		progs:     map[*cl.Program]*clProgram{},
		done:      make(chan struct{}),
		abandoned: make(chan struct{}),
		closeWait: o.closeWait,
		fillGen:   1,
		classes:   sizeClasses(info.BaseAlignBytes),
	}
	for i := range o.streams {
		q, err := c.NewQueue()
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("opencl: new device %s stream %d: %w", d.id, i, err)
		}
		d.streams = append(d.streams, &clStream{d: d, idx: i, q: q, kernels: map[kernelKey]*streamKernel{},
			hwake: make(chan struct{}, 1), prefix: fmt.Sprintf("opencl: %s stream %d: ", d.id, i)})
	}
	if d.fillq, err = c.NewQueue(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("opencl: new device %s fill queue: %w", d.id, err)
	}
	for _, s := range d.streams {
		d.queues = append(d.queues, s.q)
	}
	d.queues = append(d.queues, d.fillq)
	d.wg.Add(len(d.streams))
	for _, s := range d.streams {
		go s.hostWork()
	}
	return d, nil
}

// InfoOf returns the Info of the OpenCL device d runs on (as Devices
// lists it), and true, when d is a device NewDevice made or the driver
// opened (gpu.Open, the Enumerator's OpenDevice that a lease.Backend's
// Acquire calls); the zero Info and false for any other device. It works
// after Close too.
func InfoOf(d gpu.Device) (Info, bool) {
	cd, ok := d.(*clDevice)
	if !ok {
		return Info{}, false
	}
	return cd.dev, true
}

// clDevice is one OpenCL device behind gpu.CodeDevice.
type clDevice struct {
	id      topology.DeviceID
	dev     Info  // what InfoOf returns
	align   int64 // the base address alignment of kernel arguments, bytes
	ctx     *cl.Context
	info    topology.DeviceFacts
	streams []*clStream
	wg      sync.WaitGroup // host workers and bridges

	// Memory of up to slabMaxBytes bytes is a region of a slab: one
	// buffer per slabRegions regions of one size class (classes), the
	// memory a sub-buffer of it. memMu guards the budget and the
	// classes' free regions and quarantines.
	memMu     sync.Mutex
	usedBytes int64
	classes   []sizeClass
	nslabs    int         // slabs made, numbering them
	queues    []*cl.Queue // the streams' queues, then fillq

	pmu   sync.Mutex
	progs map[*cl.Program]*clProgram

	// Zero fills of new or reused memory (clMemory.Zero) go on fillq in
	// generations. Slab memory zeroed in generation fillGen waits as a
	// bit of its slab's pend, the slab in dirty; other memory is filled
	// at once. The first stream command on memory of that generation
	// seals it (ready): it launches one zero kernel per maximal run of
	// pending regions of each dirty slab, then one marker, fillMark,
	// after every fill enqueued before it, so each stream waits once per
	// generation, not once per memory. The marker is passive
	// (cl.Queue.PassiveMarker): the waiter of the first stream that
	// settles its wait examines the fills, so no fill-queue thread wakes
	// per generation. Generations
	// are numbered from 1; fillDone is the highest whose marker has been
	// seen to complete successfully.
	fillq    *cl.Queue
	fmu      sync.Mutex    // guards the fields below, the slabs' pend, dirty and runs, and the enqueues on fillq
	fillGen  uint64        // the generation fills enqueued now belong to
	fillMark *cl.Event     // the marker of generation fillGen-1, or nil
	dirty    []*slab       // the slabs with regions pending a fill, in order
	zeroKs   []*zeroKernel // fillq's zero kernels, made on first use
	fillDone atomic.Uint64
	// zeroMade and zeroReleased count the slabs' run sub-buffers made and
	// evicted; zeroSets counts the arguments set on zero kernels.
	zeroMade, zeroReleased, zeroSets uint64

	lost atomic.Pointer[error] // the first failure that lost the device

	closeOnce sync.Once
	closedA   atomic.Bool
	done      chan struct{} // closed when Close has finished
	closeErr  error

	abandonOnce sync.Once
	abandoned   chan struct{} // closed by Abandon
	closeWait   time.Duration // how long Close waits once abandoned
}

var (
	_ gpu.CodeDevice = (*clDevice)(nil)
	_ gpu.Abandoner  = (*clDevice)(nil)
	_ gpu.CodeStream = (*clStream)(nil)
	_ gpu.Event      = (*clEvent)(nil)
	_ gpu.Memory     = (*clMemory)(nil)
	_ gpu.Program    = (*clProgram)(nil)
)

func (d *clDevice) ID() topology.DeviceID { return d.id }
func (d *clDevice) Kind() string          { return Kind }
func (d *clDevice) Code() string          { return "opencl" }
func (d *clDevice) NumStreams() int       { return len(d.streams) }
func (d *clDevice) String() string        { return d.id.String() + " (" + d.info.Name + ")" }

// ArgAlignBytes is the device's CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes:
// a kernel argument at a non-zero offset binds a sub-buffer, whose origin
// must be a multiple of it.
func (d *clDevice) ArgAlignBytes() int64 { return d.align }

// Info returns the device's facts: the OpenCL device's name and vendor,
// its global memory as MemoryBytes, its compute units as Cores.
func (d *clDevice) Info() topology.DeviceFacts { return d.info }

// Stream returns stream i; it panics when i is out of range.
func (d *clDevice) Stream(i int) gpu.Stream {
	if i < 0 || i >= len(d.streams) {
		panic(fmt.Sprintf("opencl: %s: stream %d out of range [0, %d)", d.id, i, len(d.streams)))
	}
	return d.streams[i]
}

// lostErr returns the device-loss error, or nil while the device works.
func (d *clDevice) lostErr() error {
	if p := d.lost.Load(); p != nil {
		return *p
	}
	return nil
}

// markLost records cause as the device's loss (the first one is kept
// for later calls) and returns cause wrapped with gpu.ErrDeviceLost.
func (d *clDevice) markLost(cause error) error {
	err := fmt.Errorf("opencl: %s: %w: %w", d.id, gpu.ErrDeviceLost, cause)
	d.lost.CompareAndSwap(nil, &err)
	return err
}

// enqueueErr wraps an error of an enqueue call: one that says the device
// is gone marks it lost.
func (d *clDevice) enqueueErr(prefix string, err error) error {
	if errors.Is(err, cl.DeviceNotAvailable) {
		return d.markLost(err)
	}
	if errors.Is(err, cl.ErrClosed) {
		return fmt.Errorf("%s%w: %w", prefix, gpu.ErrClosed, err)
	}
	return fmt.Errorf("%s%w", prefix, err)
}

// Alloc makes bytes (>= 0) of device memory, counted against the
// device's global memory, reading as zeroes (see Zero). Zero bytes make
// memory with no OpenCL buffer, which a kernel argument binds as a NULL
// pointer. Memory of up to 64 KiB is a sub-buffer over a region of a
// slab, a buffer the device carves into regions of one power-of-two
// size (from the base address alignment up): a released region is
// handed out again only once every command enqueued on any of the
// device's queues before its Release has been seen to finish (the
// queues' markers; Alloc never waits for them: it makes another slab,
// and enqueues a marker on each queue the oldest released region waits
// for). A device keeps its slabs until Close, so it holds slabs for its
// peak of small memory even after that memory is released; the budget
// counts the bytes asked for, not the slabs nor a region's rounding up
// to its size. Larger memory is a buffer of its own, freed by Release.
// Errors: a negative size, the budget exceeded (naming the device, the
// size and what is in use), a failed OpenCL call, gpu.ErrDeviceLost,
// gpu.ErrClosed.
func (d *clDevice) Alloc(bytes int64) (gpu.Memory, error) {
	if bytes < 0 {
		return nil, fmt.Errorf("opencl: %s: alloc %d bytes: the size must not be negative", d.id, bytes)
	}
	if d.closedA.Load() {
		return nil, fmt.Errorf("opencl: %s: alloc: %w", d.id, gpu.ErrClosed)
	}
	if err := d.lostErr(); err != nil {
		return nil, err
	}
	if bytes == 0 {
		return &clMemory{d: d, b: d.ctx.NullBuffer()}, nil
	}
	d.memMu.Lock()
	if total := d.info.MemoryBytes; bytes > total-d.usedBytes {
		used := d.usedBytes
		d.memMu.Unlock()
		return nil, fmt.Errorf("opencl: %s: alloc %d bytes: %d of its %d bytes are in use", d.id, bytes, used, total)
	}
	d.usedBytes += bytes
	d.memMu.Unlock()
	m, err := d.carve(bytes)
	if err != nil {
		d.unbudget(bytes)
		if errors.Is(err, cl.ErrClosed) {
			return nil, fmt.Errorf("opencl: %s: alloc: %w", d.id, gpu.ErrClosed)
		}
		return nil, fmt.Errorf("opencl: %s: %w", d.id, err)
	}
	if err := m.Zero(); err != nil {
		_ = m.Release()
		return nil, err
	}
	return m, nil
}

func (d *clDevice) unbudget(bytes int64) {
	d.memMu.Lock()
	d.usedBytes -= bytes
	d.memMu.Unlock()
}

// slabMaxBytes is the size of the largest size class (memory above it is
// a buffer of its own); slabBytes is the most bytes of one slab, and
// slabRegions the most regions (one bit each of a uint64).
const (
	slabMaxBytes = 64 << 10
	slabBytes    = 1 << 20
	slabRegions  = 64
)

// sizeClass is the regions of one size and the slabs carved into them;
// the slices are guarded by d.memMu.
type sizeClass struct {
	bytes   int64         // of a region: a multiple of the base address alignment
	regions int           // per slab, 1 to slabRegions
	avail   []*slab       // the slabs with a free region
	quar    []quarantined // released regions, in release order, from qhead
	qhead   int
	nudged  int // qhead+1 when the queues quar[qhead] waits for were given a marker
}

// quarantined is a released region, free once every queue i has settled
// the command numbered after[i] (0: nothing to wait for).
type quarantined struct {
	s     *slab
	r     int
	after []uint64
}

// slab is one buffer of a size class's regions. No command binds the
// buffer itself, only sub-buffers of it (see zeroKernels).
type slab struct {
	b    *cl.Buffer
	c    *sizeClass
	n    int    // its number on the device, in creation order
	free uint64 // regions free to hand out; under d.memMu
	pend uint64 // regions with a zero fill pending; under d.fmu
	// dirty: the slab is in d.dirty; under d.fmu.
	dirty bool
	runs  []*zeroRun // the sub-buffers its zero kernels bind, at most zeroRuns; under d.fmu
}

// sizeClasses returns the size classes of a device whose base address
// alignment is align bytes: from max(align, 64) bytes (so a region holds
// whole 8-byte words and starts on the alignment) doubling up to
// slabMaxBytes; none when align is larger.
func sizeClasses(align int64) []sizeClass {
	var cs []sizeClass
	for b := max(align, 64); b <= slabMaxBytes; b *= 2 {
		cs = append(cs, sizeClass{bytes: b, regions: int(min(max(slabBytes/b, 1), slabRegions))})
	}
	return cs
}

// carve makes memory of bytes (> 0) bytes: a region of a slab of its
// size class, or a buffer of its own when no class holds it.
func (d *clDevice) carve(bytes int64) (*clMemory, error) {
	var c *sizeClass
	for i := range d.classes {
		if d.classes[i].bytes >= bytes {
			c = &d.classes[i]
			break
		}
	}
	if c == nil {
		b, err := d.ctx.Alloc(bytes)
		if err != nil {
			return nil, err
		}
		return &clMemory{d: d, b: b}, nil
	}
	d.memMu.Lock()
	s, r, err := d.take(c)
	d.memMu.Unlock()
	if err != nil {
		return nil, err
	}
	b, err := s.b.Sub(int64(r)*c.bytes, bytes)
	if err != nil {
		d.memMu.Lock()
		d.free(s, r)
		d.memMu.Unlock()
		return nil, err
	}
	return &clMemory{d: d, b: b, s: s, r: r}, nil
}

// take takes a free region of c, making a slab when there is none; d.memMu
// is held.
func (d *clDevice) take(c *sizeClass) (*slab, int, error) {
	for ; c.qhead < len(c.quar) && d.settled(c.quar[c.qhead].after); c.qhead++ {
		q := c.quar[c.qhead]
		c.quar[c.qhead] = quarantined{}
		d.free(q.s, q.r)
	}
	if c.qhead > 0 && (c.qhead == len(c.quar) || c.qhead > 64 && 2*c.qhead > len(c.quar)) {
		n := copy(c.quar, c.quar[c.qhead:])
		clear(c.quar[n:])
		c.quar, c.nudged, c.qhead = c.quar[:n], max(c.nudged-c.qhead, 0), 0
	}
	if len(c.avail) == 0 {
		if c.qhead < len(c.quar) && c.nudged != c.qhead+1 {
			// Markers behind the commands the oldest released region
			// waits for, so that it is seen free once they finish.
			c.nudged = c.qhead + 1
			for i, q := range d.queues {
				if c.quar[c.qhead].after[i] > q.Settled() {
					if e, err := q.Checkpoint(); err == nil {
						e.Release()
					}
				}
			}
		}
		b, err := d.ctx.Alloc(c.bytes * int64(c.regions))
		if err != nil {
			return nil, 0, err
		}
		s := &slab{b: b, c: c, n: d.nslabs}
		d.nslabs++
		for r := range c.regions {
			d.free(s, r)
		}
	}
	s := c.avail[len(c.avail)-1]
	r := bits.TrailingZeros64(s.free)
	if s.free &^= 1 << r; s.free == 0 {
		c.avail[len(c.avail)-1] = nil
		c.avail = c.avail[:len(c.avail)-1]
	}
	return s, r, nil
}

// free makes region r of s free to hand out; d.memMu is held.
func (d *clDevice) free(s *slab, r int) {
	if s.free == 0 {
		s.c.avail = append(s.c.avail, s)
	}
	s.free |= 1 << r
}

// settled reports whether every queue i has settled the command numbered
// after[i].
func (d *clDevice) settled(after []uint64) bool {
	for i := range after {
		if after[i] > d.queues[i].Settled() {
			return false
		}
	}
	return true
}

// quarantine holds region r of s, just released, until the commands
// enqueued on the device so far have been seen to finish.
func (d *clDevice) quarantine(s *slab, r int) {
	var after []uint64
	for i, q := range d.queues {
		if n := q.LastCommand(); n > q.Settled() {
			if after == nil {
				after = make([]uint64, len(d.queues))
			}
			after[i] = n
		}
	}
	d.memMu.Lock()
	defer d.memMu.Unlock()
	if after == nil {
		d.free(s, r)
		return
	}
	s.c.quar = append(s.c.quar, quarantined{s: s, r: r, after: after})
}

// Program builds OpenCL C source with options on the device through the
// context's cache (cl.Context.Program): the same source and options give
// the same program. A compile error is a *BuildError with the log.
func (d *clDevice) Program(name, source, options string) (gpu.Program, error) {
	if d.closedA.Load() {
		return nil, fmt.Errorf("opencl: %s: program %q: %w", d.id, name, gpu.ErrClosed)
	}
	p, err := d.ctx.Program(name, source, options)
	if err != nil {
		if errors.Is(err, cl.ErrClosed) {
			return nil, fmt.Errorf("opencl: %s: program %q: %w", d.id, name, gpu.ErrClosed)
		}
		var be *cl.BuildError
		if errors.As(err, &be) { // one "opencl:" prefix: the build error's
			return nil, fmt.Errorf("%s: %w", d.id, &BuildError{Program: be.Program, Device: be.Device, Log: be.Log, err: be})
		}
		return nil, fmt.Errorf("opencl: %s: %w", d.id, err)
	}
	d.pmu.Lock()
	defer d.pmu.Unlock()
	w, ok := d.progs[p]
	if !ok {
		w = &clProgram{d: d, p: p}
		d.progs[p] = w
	}
	return w, nil
}

// Abandon marks the device lost with cause (see gpu.Abandoner and
// gpu.ErrDeviceLost): later enqueues and Alloc fail with an error wrapping
// gpu.ErrDeviceLost and cause, and Close waits at most the device's close
// wait (WithCloseWait) for what is enqueued.
func (d *clDevice) Abandon(cause error) {
	d.markLost(cause)
	d.abandonOnce.Do(func() { close(d.abandoned) })
}

// Close refuses new work, lets everything enqueued finish (host tasks,
// and bridged waits, which wait for their events to fire), stops every
// goroutine of the device and releases the context. Every call waits for
// that and returns the same result: nil, or the errors releasing OpenCL
// objects returned. Events recorded before stay usable; Record after
// Close returns an event that has fired, with the failures reported for
// the commands after the last Record.
//
// Once the device has been abandoned (Abandon), a call waits at most the
// close wait (WithCloseWait; DefaultCloseWait) for that, and returns an
// error wrapping gpu.ErrDeviceLost if it has not finished by then: the
// commands still enqueued, the queues, their waiter and host goroutines,
// the goroutine finishing the close, the device memory and the host
// memory pinned for copies are then leaked (they are released if the
// commands ever finish; OpenCL cannot interrupt a running kernel).
func (d *clDevice) Close() error {
	d.closeOnce.Do(func() {
		d.closedA.Store(true)
		go d.shutdown() // Close waits for it, unless the device is abandoned
	})
	select {
	case <-d.done:
		return d.closeErr
	case <-d.abandoned:
	}
	t := time.NewTimer(d.closeWait)
	defer t.Stop()
	select {
	case <-d.done:
		return d.closeErr
	case <-t.C:
		return fmt.Errorf("opencl: %s: close: commands still running %v after the device was abandoned, leaked: %w", d.id, d.closeWait, d.lostErr())
	}
}

// shutdown is Close's work; it closes d.done when it has finished.
func (d *clDevice) shutdown() {
	for _, s := range d.streams {
		s.close()
	}
	for _, s := range d.streams {
		s.hmu.Lock()
		s.hclosed = true
		s.hmu.Unlock()
		s.hsignal()
	}
	d.wg.Wait()
	for _, s := range d.streams {
		s.release()
	}
	d.fmu.Lock()
	if d.fillMark != nil {
		d.fillMark.Release()
		d.fillMark = nil
	}
	d.fmu.Unlock()
	d.closeErr = d.ctx.Close()
	close(d.done)
}

// clProgram is a Program of the device's context.
type clProgram struct {
	d *clDevice
	p *cl.Program
}

// Name returns the name the program was first built under.
func (p *clProgram) Name() string { return p.p.Name() }

// clMemory is a device Buffer counted against the device's budget (a
// sub-buffer over region r of slab s, or one of its own when s is nil),
// with the sub-buffers kernel arguments at an offset made of it, and the
// fill generation of its latest zero fill.
type clMemory struct {
	d        *clDevice
	b        *cl.Buffer // for zero bytes, a NullBuffer
	s        *slab
	r        int
	released atomic.Bool
	gen      atomic.Uint64 // the fill generation of its latest Zero; 0: none

	mu   sync.Mutex
	subs map[int64]*cl.Buffer
}

func (m *clMemory) Device() topology.DeviceID { return m.d.id }
func (m *clMemory) Bytes() int64              { return m.b.Bytes() }

// Zero fills the memory with zeroes on the device's fill queue (no
// stream's), and makes the first commands of every stream that use the
// memory after Zero returns wait for that fill on the device (no host
// thread blocks). The fills of many Zero calls are enqueued together when
// a stream first uses one of them: slab memory (see Alloc) is zeroed by
// one kernel launch per contiguous run of the regions of a slab zeroed
// since the last such launch, and one marker after them all is what each
// stream waits for, once. Commands enqueued before it must have
// completed. A failed fill is reported by the stream events recorded
// after the first such commands of each stream, and so is every later
// fill generation's, as the device is then suspect. Errors: released
// memory (gpu.ErrClosed), an *Error from OpenCL, gpu.ErrDeviceLost,
// gpu.ErrClosed after Close.
func (m *clMemory) Zero() error {
	if m.b.Bytes() == 0 {
		return nil // zero bytes
	}
	if err := m.d.lostErr(); err != nil {
		return err
	}
	m.mu.Lock() // Release waits: the buffer outlives the enqueue
	defer m.mu.Unlock()
	if m.released.Load() {
		return fmt.Errorf("opencl: %s: zero %d bytes: memory released: %w", m.d.id, m.b.Bytes(), gpu.ErrClosed)
	}
	d := m.d
	if d.closedA.Load() {
		return fmt.Errorf("opencl: %s: zero %d bytes: %w", d.id, m.b.Bytes(), gpu.ErrClosed)
	}
	d.fmu.Lock()
	defer d.fmu.Unlock()
	switch {
	case m.s != nil:
		m.s.pend |= 1 << m.r
		if !m.s.dirty {
			m.s.dirty = true
			d.dirty = append(d.dirty, m.s)
		}
	default:
		if err := d.fillq.Fill(m.b, 0, m.b.Bytes(), []byte{0}); err != nil {
			return d.enqueueErr(fmt.Sprintf("opencl: %s: zero %d bytes: ", d.id, m.b.Bytes()), err)
		}
	}
	m.gen.Store(d.fillGen)
	return nil
}

// ready makes the commands s enqueues next wait for m's latest zero fill
// while the stream has not waited for its generation and it is not known
// to have completed successfully; s.mu is held. It seals the fill
// generation when no marker covers it yet.
func (s *clStream) ready(m *clMemory) error {
	g := m.gen.Load()
	if g <= s.fillWaited || g <= s.d.fillDone.Load() {
		return nil
	}
	d := s.d
	d.fmu.Lock()
	defer d.fmu.Unlock()
	if g >= d.fillGen {
		if err := d.seal(); err != nil {
			return d.enqueueErr(s.prefix, err)
		}
	}
	e, sealed := d.fillMark, d.fillGen-1
	if succeeded(e) {
		d.fillDone.Store(sealed) // written under fmu only
	} else if err := s.q.Wait(e); err != nil {
		// Behind the fills, or their failure, which the wait carries to
		// the stream's next event.
		return d.enqueueErr(s.prefix, err)
	}
	s.fillWaited = sealed
	return nil
}

// zeroKernels is how many zero kernels the fill queue has: each cached
// run (zeroRun) is zeroed by the kernel it was given when made, round
// robin, which keeps the arguments of its last launch, so that a run
// zeroed again, as a reused plan's are, sets none. zeroItems is the most
// work-items of a launch per region. zeroRuns bounds a slab's cached
// runs: a 64-region mask has at most 32 runs, so the runs of one
// generation never evict each other.
//
// The zero kernels conform to OpenCL's rules for sub-buffers (OpenCL
// 1.2 §5.2.2, clCreateSubBuffer), which define concurrent commands on
// sub-buffers of one buffer only when they do not overlap (or all
// read), and never a command on the buffer beside commands on its
// sub-buffers. No command binds a slab's buffer: memory is a sub-buffer
// over its region (and its arguments at an offset sub-buffers inside
// it), and a zero kernel binds a sub-buffer over one maximal run of its
// slab's pending regions. A pending region is in no running command:
// Zero requires the commands enqueued on the memory before it to have
// completed, a freshly allocated region has been seen free of the
// commands of its previous holder (Alloc), and every command enqueued
// on it after Zero waits for the generation's marker, behind the zero
// kernel. So a zero kernel's sub-buffer overlaps no sub-buffer in use
// while it runs, whatever the other queues run over the slab's other
// regions.
const (
	zeroKernels = 16
	zeroItems   = 64
	zeroRuns    = slabRegions / 2
)

// zeroSource defines zero0 … zero15, each zeroK(b, words): the G
// work-items zero words i, i+G, … below words of b.
var zeroSource = func() string {
	var src strings.Builder
	for k := range zeroKernels {
		fmt.Fprintf(&src, "__kernel void zero%d(__global ulong *b, ulong words) {\n"+
			"\tfor (ulong j = get_global_id(0); j < words; j += get_global_size(0)) b[j] = 0;\n}\n", k)
	}
	return src.String()
}()

// zeroKernel is a zero kernel of the fill queue with the run whose
// arguments were last set on it (nil: none).
type zeroKernel struct {
	k   *cl.Kernel
	run *zeroRun
}

// zeroRun is a sub-buffer over the regions first to first+count-1 of a
// slab, which the zero kernel zk zeroes when exactly they are a run of
// its pending regions; used is the fill generation it was last zeroed in.
type zeroRun struct {
	b            *cl.Buffer
	first, count int
	zk           int
	used         uint64
}

// seal launches the zero kernels over the pending regions of the dirty
// slabs and enqueues the marker of generation fillGen after them, which
// then closes; d.fmu is held. On an error the regions not yet launched
// over stay pending.
func (d *clDevice) seal() error {
	for i, s := range d.dirty {
		if err := d.zero(s); err != nil {
			d.dirty = d.dirty[:copy(d.dirty, d.dirty[i:])]
			return err
		}
		s.dirty = false
	}
	clear(d.dirty)
	d.dirty = d.dirty[:0]
	// The marker waits on the previous one unless that is known to have
	// succeeded, so that it reports every earlier failure too: a marker
	// that succeeded vouches for every generation up to it.
	var wait []*cl.Event
	if old := d.fillMark; old != nil && !succeeded(old) {
		wait = append(wait, old)
	}
	e, err := d.fillq.PassiveMarker(wait...)
	if err != nil {
		return err
	}
	if d.fillMark != nil {
		d.fillMark.Release()
	}
	d.fillMark = e
	d.fillGen++
	return nil
}

// zero launches a zero kernel over each maximal run of s's pending
// regions, through the run's cached sub-buffer, and takes the run's
// regions out of s.pend once launched. d.fmu is held.
func (d *clDevice) zero(s *slab) error {
	if d.zeroKs == nil && s.pend != 0 {
		p, err := d.ctx.Program("zero", zeroSource, "")
		if err != nil {
			return err
		}
		ks := make([]*zeroKernel, zeroKernels)
		for i := range ks {
			k, err := d.fillq.Kernel(p, fmt.Sprint("zero", i))
			if err != nil {
				return err
			}
			ks[i] = &zeroKernel{k: k}
		}
		d.zeroKs = ks
	}
	for s.pend != 0 {
		first := bits.TrailingZeros64(s.pend)
		count := bits.TrailingZeros64(^(s.pend >> first))
		run, err := d.zeroRun(s, first, count)
		if err != nil {
			return err
		}
		zk := d.zeroKs[run.zk]
		words := uint64(run.b.Bytes() / 8)
		if zk.run != run {
			zk.run = nil
			if err := zk.k.SetBuffer(0, run.b); err != nil {
				return err
			}
			if err := zk.k.Set64(1, words, uint64(0)); err != nil {
				return err
			}
			d.zeroSets += 2
			zk.run = run
		}
		items := count * int(min(uint64(s.c.bytes/8), zeroItems))
		if err := d.fillq.LaunchLabel(zk.k, []int{items}, nil, "fill"); err != nil {
			return err
		}
		s.pend &^= (uint64(1)<<count - 1) << first
	}
	return nil
}

// zeroRun returns s's cached run over the count regions from first,
// making it (and evicting, releasing, the run least recently zeroed when
// s has zeroRuns) when there is none. d.fmu is held.
func (d *clDevice) zeroRun(s *slab, first, count int) (*zeroRun, error) {
	oldest := 0
	for i, r := range s.runs {
		if r.first == first && r.count == count {
			r.used = d.fillGen
			return r, nil
		}
		if r.used < s.runs[oldest].used {
			oldest = i
		}
	}
	b, err := s.b.Sub(int64(first)*s.c.bytes, int64(count)*s.c.bytes)
	if err != nil {
		return nil, err
	}
	run := &zeroRun{b: b, first: first, count: count, zk: int(d.zeroMade % zeroKernels), used: d.fillGen}
	d.zeroMade++
	if len(s.runs) < zeroRuns {
		s.runs = append(s.runs, run)
		return run, nil
	}
	// OpenCL keeps the evicted sub-buffer until the zero kernels enqueued
	// over it finish.
	old := s.runs[oldest]
	s.runs[oldest] = run
	d.zeroReleased++
	if err := old.b.Release(); err != nil {
		return nil, err
	}
	return run, nil
}

// succeeded reports whether e has completed without failures.
func succeeded(e *cl.Event) bool {
	select {
	case <-e.Done():
		return e.Err() == nil
	default:
		return false
	}
}

// Release frees the buffer and its sub-buffers (OpenCL keeps the memory
// until the commands enqueued on it finish; a slab region is handed out
// again once those are seen to have finished, see Alloc) and returns its
// bytes to the device's budget. It is idempotent.
func (m *clMemory) Release() error {
	if !m.released.CompareAndSwap(false, true) {
		return nil
	}
	m.mu.Lock()
	subs := m.subs
	m.subs = nil
	m.mu.Unlock()
	if m.s != nil {
		m.d.fmu.Lock() // the region leaves the pending fills before it is released
		m.s.pend &^= 1 << m.r
		m.d.fmu.Unlock()
	}
	var errs []error
	for _, s := range subs {
		errs = append(errs, s.Release())
	}
	errs = append(errs, m.b.Release())
	if m.s != nil {
		m.d.quarantine(m.s, m.r)
	}
	m.d.unbudget(m.b.Bytes())
	return errors.Join(errs...)
}

// at returns the buffer a kernel argument at byte off points to: the
// buffer itself, or a sub-buffer from off to the end (made once per
// offset and kept until Release).
func (m *clMemory) at(off int64) (*cl.Buffer, error) {
	if m.released.Load() {
		return nil, fmt.Errorf("memory released: %w", gpu.ErrClosed)
	}
	if off == 0 {
		return m.b, nil
	}
	if off < 0 || off >= m.b.Bytes() {
		return nil, fmt.Errorf("offset %d outside the %d-byte memory", off, m.b.Bytes())
	}
	if a := m.d.align; a > 0 && off%a != 0 {
		return nil, fmt.Errorf("offset %d is not a multiple of the device's %d-byte base address alignment (CL_DEVICE_MEM_BASE_ADDR_ALIGN)", off, a)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.subs[off]; ok {
		return b, nil
	}
	parent, base := m.b, int64(0)
	if m.s != nil { // OpenCL makes no sub-buffer of a sub-buffer
		parent, base = m.s.b, int64(m.r)*m.s.c.bytes
	}
	b, err := parent.Sub(base+off, m.b.Bytes()-off)
	if err != nil {
		return nil, err
	}
	if m.subs == nil {
		m.subs = map[int64]*cl.Buffer{}
	}
	m.subs[off] = b
	return b, nil
}

// runTask runs one host task, recovering a panic into the stream's panic
// record. A task that calls runtime.Goexit ends the host goroutine: a
// replacement resumes the stream's host work after the task.
func (s *clStream) runTask(t gpu.Task) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if r := recover(); r != nil {
			s.notePanic(&gpu.PanicError{Device: s.d.id, Stream: s.idx, Value: r, Stack: debug.Stack()})
			return
		}
		s.notePanic(&gpu.PanicError{Device: s.d.id, Stream: s.idx, Goexit: true, Stack: debug.Stack()})
		s.d.wg.Add(1)
		go s.hostWork()
	}()
	t.Run()
	returned = true
}

func (s *clStream) notePanic(pe *gpu.PanicError) {
	s.pmu.Lock()
	if s.panicE == nil {
		s.panicE = pe
	}
	s.panicsN++
	s.pmu.Unlock()
}

// Driver opening.

func init() { gpu.Register(Kind, driver{}) }

type driver struct{}

func (driver) Open(_ context.Context, cfg gpu.Config) (gpu.Set, error) {
	if err := noSettings("open", cfg); err != nil {
		return nil, err
	}
	streams := cfg.Streams
	if streams == 0 {
		streams = DefaultStreams
	}
	if streams < 1 || streams > MaxStreams {
		return nil, fmt.Errorf("opencl: open: %d streams per device: want 1 to %d", streams, MaxStreams)
	}
	avail, err := available()
	if err != nil {
		return nil, fmt.Errorf("opencl: open: %w", err)
	}
	set := &deviceSet{}
	for i, d := range avail {
		dev, err := NewDevice(d, WithStreams(streams), WithIndex(i))
		if err != nil {
			_ = set.Close()
			return nil, err
		}
		set.devs = append(set.devs, dev)
	}
	return set, nil
}

// noSettings refuses driver settings, which the OpenCL driver has none of,
// for the driver's operation op.
func noSettings(op string, cfg gpu.Config) error {
	if s := cfg.Settings; len(s) > 0 {
		return fmt.Errorf("opencl: %s: a driver setting %T: the OpenCL driver takes none", op, s[0])
	}
	return nil
}

// deviceSet is the devices one driver Open returned.
type deviceSet struct{ devs []gpu.Device }

func (s *deviceSet) Devices() []gpu.Device { return append([]gpu.Device(nil), s.devs...) }

func (s *deviceSet) Close() error {
	var errs []error
	for _, d := range s.devs {
		errs = append(errs, d.Close())
	}
	return errors.Join(errs...)
}
