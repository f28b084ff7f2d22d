package opencl

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl/internal/cl"
	"github.com/streamdag/streamdag/topology"
)

// Kind is the driver kind of OpenCL devices: importing this package
// registers its driver under Kind, so gpu.Open(ctx, opencl.Kind, cfg)
// opens every available OpenCL device (see NewDevice), with cfg.Streams
// streams each (0: DefaultStreams), as "opencl0", "opencl1", … in the
// order Devices lists them. With no OpenCL library the error wraps
// ErrUnavailable; with no platform or no available device, ErrNoPlatform.
const Kind = "opencl"

// DefaultStreams is the number of streams of a device the driver opens
// when gpu.Config.Streams is 0.
const DefaultStreams = 4

// MaxStreams bounds the stream count of one device (each stream is an
// OpenCL command queue, a waiter goroutine and a host-task goroutine).
const MaxStreams = 64

// DeviceOption configures NewDevice.
type DeviceOption func(*deviceOptions) error

type deviceOptions struct {
	index     int
	closeWait time.Duration
}

// DefaultCloseWait is how long Close waits for the commands of an
// abandoned device (Abandon) when WithCloseWait does not say.
const DefaultCloseWait = time.Second

// WithCloseWait sets how long Close waits, once the device has been
// abandoned (gpu.Abandoner), for the commands enqueued on it to finish
// before it returns an error (d > 0; default DefaultCloseWait). Close of
// a device that was not abandoned waits for everything enqueued, without
// bound. A d <= 0 makes NewDevice fail.
func WithCloseWait(d time.Duration) DeviceOption {
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
func WithIndex(n int) DeviceOption {
	return func(o *deviceOptions) error {
		if n < 0 {
			return fmt.Errorf("opencl: WithIndex(%d): the index must not be negative", n)
		}
		o.index = n
		return nil
	}
}

// NewDevice opens dev (from Platforms, Devices or InfoOf) as a gpu.CodeDevice
// with streams streams (1 to MaxStreams): one OpenCL context, one
// in-order command queue per stream (with a waiter goroutine) and one
// goroutine per stream that runs its host tasks. Kind and Code are
// "opencl"; Info gives the device's name, vendor, global memory and
// compute units (as Cores). The caller owns the device and must Close it.
// Errors (nothing is left running after one): a bad stream count or
// option, the zero Info, a failed OpenCL call (naming it and its
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
func NewDevice(dev Info, streams int, opts ...DeviceOption) (gpu.CodeDevice, error) {
	o := deviceOptions{closeWait: DefaultCloseWait}
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
	if streams < 1 || streams > MaxStreams {
		return nil, fmt.Errorf("opencl: new device %s: %d streams: want 1 to %d", dev.Name, streams, MaxStreams)
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
	}
	for i := range streams {
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

	memMu     sync.Mutex
	usedBytes int64

	pmu   sync.Mutex
	progs map[*cl.Program]*clProgram

	fillq *cl.Queue // zero fills of new or reused memory (clMemory.Zero)

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
// pointer. Errors: a negative size, the budget exceeded (naming the
// device, the size and what is in use), a failed OpenCL call,
// gpu.ErrDeviceLost, gpu.ErrClosed.
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
		m := &clMemory{d: d, b: d.ctx.NullBuffer()}
		m.zeroed.Store(true)
		return m, nil
	}
	d.memMu.Lock()
	if total := d.info.MemoryBytes; bytes > total-d.usedBytes {
		used := d.usedBytes
		d.memMu.Unlock()
		return nil, fmt.Errorf("opencl: %s: alloc %d bytes: %d of its %d bytes are in use", d.id, bytes, used, total)
	}
	d.usedBytes += bytes
	d.memMu.Unlock()
	b, err := d.ctx.Alloc(bytes)
	if err != nil {
		d.unbudget(bytes)
		if errors.Is(err, cl.ErrClosed) {
			return nil, fmt.Errorf("opencl: %s: alloc: %w", d.id, gpu.ErrClosed)
		}
		return nil, fmt.Errorf("opencl: %s: %w", d.id, err)
	}
	m := &clMemory{d: d, b: b}
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

// clMemory is a device Buffer counted against the device's budget, with
// the sub-buffers kernel arguments at an offset made of it, and the
// marker after its zero fill while a stream may have to wait for it.
type clMemory struct {
	d        *clDevice
	b        *cl.Buffer // for zero bytes, a NullBuffer
	released atomic.Bool
	zeroed   atomic.Bool // the fill has completed and its marker is released

	mu   sync.Mutex
	subs map[int64]*cl.Buffer
	fill *cl.Event // the zero fill's marker on the device's fill queue, or nil
}

func (m *clMemory) Device() topology.DeviceID { return m.d.id }
func (m *clMemory) Bytes() int64              { return m.b.Bytes() }

// Zero enqueues filling the memory with zeroes on the device's fill
// queue (no stream's), and makes the first commands of every stream that
// use the memory after Zero returns wait for that fill on the device (no
// host thread blocks). Commands enqueued before it must have completed.
// A failed fill is reported by the stream events recorded after those
// commands. Errors: released memory (gpu.ErrClosed), an *Error from
// OpenCL, gpu.ErrDeviceLost, gpu.ErrClosed after Close.
func (m *clMemory) Zero() error {
	if m.b.Bytes() == 0 {
		return nil // zero bytes
	}
	if err := m.d.lostErr(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.released.Load() {
		return fmt.Errorf("opencl: %s: zero %d bytes: memory released: %w", m.d.id, m.b.Bytes(), gpu.ErrClosed)
	}
	if m.fill != nil {
		m.fill.Release()
		m.fill = nil
	}
	m.zeroed.Store(false)
	err := m.d.fillq.Fill(m.b, 0, m.b.Bytes(), []byte{0})
	if err == nil {
		m.fill, err = m.d.fillq.Marker()
	}
	if err != nil {
		m.zeroed.Store(true)
		return m.d.enqueueErr(fmt.Sprintf("opencl: %s: zero %d bytes: ", m.d.id, m.b.Bytes()), err)
	}
	return nil
}

// ready makes the commands s enqueues next wait for m's zero fill while
// it has not completed successfully; s.mu is held.
func (s *clStream) ready(m *clMemory) error {
	if m.zeroed.Load() {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.fill
	if e == nil {
		return nil
	}
	select {
	case <-e.Done():
		if e.Err() == nil {
			e.Release()
			m.fill = nil
			m.zeroed.Store(true)
			return nil
		}
	default:
	}
	// Behind the fill, or its failure, which the wait carries to the
	// stream's next event.
	if err := s.q.Wait(e); err != nil {
		return s.d.enqueueErr(s.prefix, err)
	}
	return nil
}

// Release frees the buffer and its sub-buffers (OpenCL keeps the memory
// until the commands enqueued on it finish) and returns its bytes to the
// device's budget. It is idempotent.
func (m *clMemory) Release() error {
	if !m.released.CompareAndSwap(false, true) {
		return nil
	}
	m.mu.Lock()
	subs := m.subs
	m.subs = nil
	if m.fill != nil {
		m.fill.Release()
		m.fill = nil
	}
	m.mu.Unlock()
	var errs []error
	for _, s := range subs {
		errs = append(errs, s.Release())
	}
	errs = append(errs, m.b.Release())
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
	b, err := m.b.Sub(off, m.b.Bytes()-off)
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
		dev, err := NewDevice(d, streams, WithIndex(i))
		if err != nil {
			_ = set.Close()
			return nil, err
		}
		set.devs = append(set.devs, dev)
	}
	return set, nil
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
