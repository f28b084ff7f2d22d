package exec_test

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// fakeCode is a gpu.CodeDevice that runs "device code" as Go functions
// on memory of its own: each stream is a worker goroutine running its
// commands in order, events fire when the worker reaches them, waits on
// events block the worker (never the caller), and failures are reported
// after the fact by the events recorded after them, as *gpu.CommandError.
// It stands for an OpenCL device where no OpenCL platform is present,
// and lets tests fail commands on purpose (fail). It declares the driver
// kind kind and the code kind code, both "opencl" unless a test sets
// them before using the device.
type fakeCode struct {
	id         topology.DeviceID
	kind, code string
	kernels    map[string]fakeKernel // by entry point
	streams    []*fakeStream
	// fail, when set, is asked before each kernel runs with the launch's
	// label: a non-nil error fails the command (the device's own
	// failure).
	fail func(label string) error
	// blank, when set, makes the device label every command "" in the
	// failures it reports (a device whose labels tell nothing apart).
	blank bool
	// memBytes is the memory Info reports (0: unknown).
	memBytes int64
	// align is the argument offset alignment ArgAlignBytes reports (0:
	// any offset); LaunchKernel refuses an offset not a multiple of it.
	align int64

	mu        sync.Mutex
	liveBytes int64
	allocs    int // Alloc calls that made memory
	programs  map[string]*fakeProgram
	ran       map[string]int // kernel launches run, by label
	waits     atomic.Int64   // Stream.Wait calls on events of this device
	lists     sync.WaitGroup // the streams' running lists
}

// fakeKernel is a fake entry point: args are []byte (the memory from the
// argument's offset) or scalars; global the launch shape.
type fakeKernel func(global []int, args []any) error

var (
	_ gpu.CodeDevice = (*fakeCode)(nil)
	_ gpu.CodeStream = (*fakeStream)(nil)
	_ gpu.Lister     = (*fakeStream)(nil)
)

func newFakeCode(id topology.DeviceID, streams int, kernels map[string]fakeKernel) *fakeCode {
	d := &fakeCode{id: id, kind: "opencl", code: "opencl", kernels: kernels, programs: map[string]*fakeProgram{}, ran: map[string]int{}}
	for i := range streams {
		s := &fakeStream{dev: d, idx: i, wake: make(chan struct{}, 1), done: make(chan struct{})}
		d.streams = append(d.streams, s)
		go s.work()
	}
	return d
}

func (d *fakeCode) ID() topology.DeviceID { return d.id }
func (d *fakeCode) Kind() string          { return d.kind }
func (d *fakeCode) Code() string          { return d.code }
func (d *fakeCode) Info() topology.DeviceFacts {
	return topology.DeviceFacts{ID: d.id, Name: "fake code device", MemoryBytes: d.memBytes}
}
func (d *fakeCode) NumStreams() int { return len(d.streams) }

func (d *fakeCode) ArgAlignBytes() int64 { return d.align }
func (d *fakeCode) Stream(i int) gpu.Stream {
	return d.streams[i]
}

// Close stops the streams after their queued commands.
func (d *fakeCode) Close() error {
	for _, s := range d.streams {
		s.close()
	}
	d.lists.Wait()
	return nil
}

// EnqueueList runs l on a goroutine of its own (Close waits for it), as
// a code device runs its lists: concurrently with the stream's others.
func (s *fakeStream) EnqueueList(after gpu.Event, n uint64, l gpu.List) (*gpu.Counter, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shut {
		return nil, 0, gpu.ErrClosed
	}
	fl := &fakeList{n: n}
	s.dev.lists.Add(1)
	go func() {
		defer s.dev.lists.Done()
		if after != nil {
			_ = after.Wait(context.Background())
		}
		l.Run(fl)
		fl.count.Publish(n)
	}()
	return &fl.count, 0, nil
}

// fakeList is a list's progress on a fake stream.
type fakeList struct {
	n     uint64
	count gpu.Counter
}

func (p *fakeList) Publish(n uint64) (uint64, error) {
	p.count.Publish(min(n, p.n))
	return math.MaxUint64, nil
}

// runs returns how many launches labelled label the device ran.
func (d *fakeCode) runs(label string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ran[label]
}

// live returns the bytes of memory allocated and not released.
func (d *fakeCode) live() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.liveBytes
}

// allocCount returns how many allocations the device has made.
func (d *fakeCode) allocCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.allocs
}

type fakeMem struct {
	dev      *fakeCode
	b        []byte
	released atomic.Bool
}

func (m *fakeMem) Device() topology.DeviceID { return m.dev.id }
func (m *fakeMem) Bytes() int64              { return int64(len(m.b)) }
func (m *fakeMem) Release() error {
	if m.released.CompareAndSwap(false, true) {
		m.dev.mu.Lock()
		m.dev.liveBytes -= int64(len(m.b))
		m.dev.mu.Unlock()
	}
	return nil
}

// Zero clears the memory at once: the contract has no command on it
// running then.
func (m *fakeMem) Zero() error {
	if m.released.Load() {
		return fmt.Errorf("fake: zero released memory: %w", gpu.ErrClosed)
	}
	clear(m.b)
	return nil
}

func (d *fakeCode) Alloc(bytes int64) (gpu.Memory, error) {
	if bytes < 0 {
		return nil, fmt.Errorf("fake: alloc %d bytes on %s", bytes, d.id)
	}
	d.mu.Lock()
	d.liveBytes += bytes
	d.allocs++
	d.mu.Unlock()
	return &fakeMem{dev: d, b: make([]byte, bytes)}, nil
}

type fakeProgram struct {
	dev  *fakeCode
	name string
}

func (p *fakeProgram) Name() string { return p.name }

// Program "builds" source: a source containing "#error" fails with a log.
func (d *fakeCode) Program(name, source, options string) (gpu.Program, error) {
	if i := strings.Index(source, "#error"); i >= 0 {
		return nil, fmt.Errorf("fake: build %q: log: %s", name, strings.TrimSpace(source[i:]))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.programs[source+"\x00"+options]
	if !ok {
		p = &fakeProgram{dev: d, name: name}
		d.programs[source+"\x00"+options] = p
	}
	return p, nil
}

// fakeCmd is one command of a stream: run returns its failure, if any;
// seq is its sequence number on the stream.
type fakeCmd struct {
	label string
	run   func() error
	ev    *fakeEvent // for a Record: fired when reached
	seq   uint64
}

type fakeStream struct {
	dev  *fakeCode
	idx  int
	mu   sync.Mutex
	q    []fakeCmd
	seq  uint64 // the last command's sequence number
	recs []fakeRec
	shut bool
	wake chan struct{}
	done chan struct{}
	// worker state
	errs []error // failures since the last Record
}

// fakeRec is an event a stream recorded after its commands up to seq.
type fakeRec struct {
	seq uint64
	ev  *fakeEvent
}

type fakeEvent struct {
	s     *fakeStream // the stream that recorded it
	fired chan struct{}
	err   error
}

func (e *fakeEvent) Done() bool {
	select {
	case <-e.fired:
		return true
	default:
		return false
	}
}

func (e *fakeEvent) Wait(ctx context.Context) error {
	select {
	case <-e.fired:
		return e.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *fakeStream) Device() topology.DeviceID { return s.dev.id }
func (s *fakeStream) Index() int                { return s.idx }

// push enqueues c and returns its sequence number (0 for a Record,
// which takes none).
func (s *fakeStream) push(c fakeCmd) (uint64, error) {
	s.mu.Lock()
	if s.shut {
		s.mu.Unlock()
		return 0, gpu.ErrClosed
	}
	if c.ev == nil {
		s.seq++
		c.seq = s.seq
	} else {
		s.recs = append(s.recs, fakeRec{seq: s.seq, ev: c.ev})
	}
	if s.dev.blank {
		c.label = ""
	}
	s.q = append(s.q, c)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return c.seq, nil
}

func (s *fakeStream) close() {
	s.mu.Lock()
	already := s.shut
	s.shut = true
	s.mu.Unlock()
	if !already {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	<-s.done
}

func (s *fakeStream) work() {
	defer close(s.done)
	for {
		s.mu.Lock()
		q := s.q
		s.q = nil
		shut := s.shut
		s.mu.Unlock()
		if len(q) == 0 {
			if shut {
				return
			}
			<-s.wake
			continue
		}
		for _, c := range q {
			if c.ev != nil {
				c.ev.err = errors.Join(s.errs...)
				s.errs = nil
				close(c.ev.fired)
				continue
			}
			if err := c.run(); err != nil {
				s.errs = append(s.errs, &gpu.CommandError{Device: s.dev.id, Stream: s.idx, Seq: c.seq, Label: c.label, Err: err})
			}
		}
	}
}

func (s *fakeStream) Launch(t gpu.Task) error {
	_, err := s.push(fakeCmd{label: "host task", run: func() error { t.Run(); return nil }})
	return err
}

func (s *fakeStream) LaunchBatch(ts []gpu.Task) error {
	for _, t := range ts {
		if err := s.Launch(t); err != nil {
			return err
		}
	}
	return nil
}

func (s *fakeStream) Record() gpu.Event {
	e := &fakeEvent{s: s, fired: make(chan struct{})}
	if _, err := s.push(fakeCmd{ev: e}); err != nil {
		close(e.fired)
	}
	return e
}

// CommandEvent returns the first event recorded after command seq.
func (s *fakeStream) CommandEvent(seq uint64) (gpu.Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := slices.BinarySearchFunc(s.recs, seq, func(r fakeRec, seq uint64) int { return cmp.Compare(r.seq, seq) })
	if seq == 0 || i == len(s.recs) {
		return nil, false
	}
	return s.recs[i].ev, true
}

func (s *fakeStream) Wait(e gpu.Event) error {
	if e == nil {
		return errors.New("fake: wait on a nil event")
	}
	if fe, ok := e.(*fakeEvent); ok && fe.s != nil && fe.s.dev == s.dev {
		s.dev.waits.Add(1)
	}
	_, err := s.push(fakeCmd{label: "wait", run: func() error {
		_ = e.Wait(context.Background()) // a foreign event's failure is its own stream's
		return nil
	}})
	return err
}

func (s *fakeStream) Synchronize(ctx context.Context) error {
	_ = s.Record().Wait(ctx)
	return ctx.Err()
}

func (s *fakeStream) mem(m gpu.Memory, off, n int64) ([]byte, error) {
	fm, ok := m.(*fakeMem)
	if !ok || fm.dev != s.dev {
		return nil, fmt.Errorf("fake: memory of another device")
	}
	if fm.released.Load() {
		return nil, gpu.ErrClosed
	}
	if off < 0 || n < 0 || off+n > int64(len(fm.b)) {
		return nil, fmt.Errorf("fake: range [%d:%d) outside %d bytes", off, off+n, len(fm.b))
	}
	return fm.b[off : off+n], nil
}

func (s *fakeStream) LaunchKernel(k *gpu.KernelLaunch) (uint64, error) {
	p, ok := k.Program.(*fakeProgram)
	if !ok || p.dev != s.dev {
		return 0, errors.New("fake: program of another device")
	}
	fn, ok := s.dev.kernels[k.Entry]
	if !ok {
		return 0, fmt.Errorf("fake: no entry point %q", k.Entry)
	}
	args := make([]any, len(k.Args))
	for i, a := range k.Args {
		if a.Mem == nil {
			args[i] = a.Scalar
			continue
		}
		if al := s.dev.align; al > 1 && a.Offset%al != 0 {
			return 0, fmt.Errorf("fake: argument %d: offset %d is not a multiple of %d bytes", i, a.Offset, al)
		}
		b, err := s.mem(a.Mem, a.Offset, a.Mem.Bytes()-a.Offset)
		if err != nil {
			return 0, fmt.Errorf("fake: argument %d: %w", i, err)
		}
		args[i] = b
	}
	global, label, fail := append([]int(nil), k.Global...), k.Label, s.dev.fail
	return s.push(fakeCmd{label: label, run: func() error {
		s.dev.mu.Lock()
		s.dev.ran[label]++
		s.dev.mu.Unlock()
		if fail != nil {
			if err := fail(label); err != nil {
				return err
			}
		}
		return fn(global, args)
	}})
}

func (s *fakeStream) CopyIn(dst gpu.Memory, off int64, src []byte) (uint64, error) {
	b, err := s.mem(dst, off, int64(len(src)))
	if err != nil {
		return 0, err
	}
	return s.push(fakeCmd{label: "copy in", run: func() error { copy(b, src); return nil }})
}

func (s *fakeStream) CopyOut(dst []byte, src gpu.Memory, off int64) (uint64, error) {
	b, err := s.mem(src, off, int64(len(dst)))
	if err != nil {
		return 0, err
	}
	return s.push(fakeCmd{label: "copy out", run: func() error { copy(dst, b); return nil }})
}

func (s *fakeStream) Copy(dst gpu.Memory, dstOff int64, src gpu.Memory, srcOff, n int64) (uint64, error) {
	d, err := s.mem(dst, dstOff, n)
	if err != nil {
		return 0, err
	}
	b, err := s.mem(src, srcOff, n)
	if err != nil {
		return 0, err
	}
	return s.push(fakeCmd{label: "copy", run: func() error { copy(d, b); return nil }})
}

func (s *fakeStream) Fill(dst gpu.Memory, off, n int64, pattern []byte) (uint64, error) {
	b, err := s.mem(dst, off, n)
	if err != nil {
		return 0, err
	}
	return s.push(fakeCmd{label: "fill", run: func() error {
		for i := 0; i < len(b); i += len(pattern) {
			copy(b[i:], pattern)
		}
		return nil
	}})
}

// errOf returns the error of a CodeStream enqueue, dropping its sequence
// number.
func errOf(_ uint64, err error) error { return err }

// u64 reads a little-endian uint64 at byte i of b.
func u64(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }
