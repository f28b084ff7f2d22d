// Package faultdev is a test double: a device that reports its loss part-way
// through its work.
//
// It wraps a gpu.CodeDevice (a real OpenCL device, say) so that the device
// reports its loss as a driver reports a GPU that fell off the bus: for
// tests of what an executor does with a loss the device itself reports. It
// is imported by tests only.
//
// The wrapper counts the commands enqueued through it (LaunchKernel,
// CopyIn, CopyOut, Copy and Fill, over all its streams, in call order).
// The first After run as they would; the device is lost from the next
// one: the InFlight commands after it are still enqueued (they were on
// their way when the device died), but the events recorded after them
// report each as a *gpu.CommandError wrapping gpu.ErrDeviceLost; from
// then on every enqueue, wait, host task, allocation and build fails
// with an error wrapping gpu.ErrDeviceLost, every event recorded after
// the loss reports it, and every Publish of a list (gpu.Lister: the
// streams still take lists) answers it. The wrapped device itself is
// left working: a test can wrap it again for its next run.
package faultdev

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// Device is a gpu.CodeDevice that reports its loss after a number of
// commands (see the package doc). Methods are safe for concurrent use.
type Device struct {
	gpu.CodeDevice
	after, inflight int64
	n               atomic.Int64 // commands enqueued (or refused) through the wrapper
	lost            atomic.Bool
	err             error
	streams         []*stream
}

var (
	_ gpu.CodeDevice = (*Device)(nil)
	_ gpu.CodeStream = (*stream)(nil)
	_ gpu.Lister     = (*stream)(nil)
)

// New wraps d: the device is lost at command after+1 (after >= 0), with
// inflight (>= 0) commands still enqueued behind the loss point. Use
// math.MaxInt64 for a device that is never lost (to count commands).
func New(d gpu.CodeDevice, after, inflight int64) *Device {
	f := &Device{CodeDevice: d, after: after, inflight: inflight,
		err: fmt.Errorf("faultdev: %s: %w (made to fail after %d commands)", d.ID(), gpu.ErrDeviceLost, after)}
	for i := range d.NumStreams() {
		f.streams = append(f.streams, &stream{d: f, in: d.Stream(i).(gpu.CodeStream)})
	}
	return f
}

// Commands returns how many commands were enqueued through the wrapper,
// the refused ones included.
func (d *Device) Commands() int64 { return d.n.Load() }

// Lost reports whether the device has reported its loss.
func (d *Device) Lost() bool { return d.lost.Load() }

// Stream returns stream i of the wrapper.
func (d *Device) Stream(i int) gpu.Stream { return d.streams[i] }

// Alloc allocates on the wrapped device until the loss.
func (d *Device) Alloc(bytes int64) (gpu.Memory, error) {
	if d.Lost() {
		return nil, d.err
	}
	return d.CodeDevice.Alloc(bytes)
}

// Program builds on the wrapped device until the loss.
func (d *Device) Program(name, source, options string) (gpu.Program, error) {
	if d.Lost() {
		return nil, d.err
	}
	return d.CodeDevice.Program(name, source, options)
}

// Close does nothing: the wrapped device is the caller's to close.
func (d *Device) Close() error { return nil }

// stream is a stream of the wrapper; mu orders its enqueues with its
// Records, so each event reports the lost commands enqueued before it.
type stream struct {
	d       *Device
	in      gpu.CodeStream
	mu      sync.Mutex
	pending []uint64 // commands enqueued after the loss point, not yet reported by an event
}

func (s *stream) Device() topology.DeviceID { return s.in.Device() }
func (s *stream) Index() int                { return s.in.Index() }

// enqueue counts one command and enqueues it with f, unless the device
// is lost and past its commands in flight.
func (s *stream) enqueue(f func() (uint64, error)) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.d.n.Add(1)
	if k <= s.d.after {
		return f()
	}
	s.d.lost.Store(true)
	if k > s.d.after+s.d.inflight {
		return 0, s.d.err
	}
	seq, err := f()
	if err == nil {
		s.pending = append(s.pending, seq)
	}
	return seq, err
}

func (s *stream) LaunchKernel(k *gpu.KernelLaunch) (uint64, error) {
	return s.enqueue(func() (uint64, error) { return s.in.LaunchKernel(k) })
}

func (s *stream) CopyIn(dst gpu.Memory, off int64, src []byte) (uint64, error) {
	return s.enqueue(func() (uint64, error) { return s.in.CopyIn(dst, off, src) })
}

func (s *stream) CopyOut(dst []byte, src gpu.Memory, off int64) (uint64, error) {
	return s.enqueue(func() (uint64, error) { return s.in.CopyOut(dst, src, off) })
}

func (s *stream) Copy(dst gpu.Memory, dstOff int64, src gpu.Memory, srcOff, n int64) (uint64, error) {
	return s.enqueue(func() (uint64, error) { return s.in.Copy(dst, dstOff, src, srcOff, n) })
}

func (s *stream) Fill(dst gpu.Memory, off, n int64, pattern []byte) (uint64, error) {
	return s.enqueue(func() (uint64, error) { return s.in.Fill(dst, off, n, pattern) })
}

// EnqueueList queues l on the wrapped stream (a gpu.Lister), lost or not;
// the list's own commands go through the wrapper, and its publishes
// answer the loss once the device is lost.
func (s *stream) EnqueueList(after gpu.Event, n uint64, l gpu.List) (*gpu.Counter, uint64, error) {
	ls, ok := s.in.(gpu.Lister)
	if !ok {
		return nil, 0, fmt.Errorf("faultdev: %s stream %d takes no lists", s.in.Device(), s.in.Index())
	}
	if l == nil {
		return ls.EnqueueList(after, n, nil) // the wrapped stream's error
	}
	return ls.EnqueueList(after, n, &list{l: l, prog: progress{d: s.d}})
}

// list is a list queued through the wrapper: its Progress answers the
// loss once the device is lost.
type list struct {
	l    gpu.List
	prog progress
}

func (l *list) Run(p gpu.Progress) {
	l.prog.p = p // the same p on every call
	l.l.Run(&l.prog)
}

// progress is the wrapped stream's Progress, answering the device's loss.
type progress struct {
	d *Device
	p gpu.Progress
}

func (p *progress) Publish(n uint64) (uint64, error) {
	next, err := p.p.Publish(n)
	if err == nil && p.d.Lost() {
		err = p.d.err
	}
	return next, err
}

// CommandEvent returns the wrapped stream's event for command seq until
// the device is lost, and none after.
func (s *stream) CommandEvent(seq uint64) (gpu.Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.d.Lost() {
		return nil, false
	}
	return s.in.CommandEvent(seq)
}

func (s *stream) Launch(t gpu.Task) error {
	if s.d.Lost() {
		return s.d.err
	}
	return s.in.Launch(t)
}

func (s *stream) LaunchBatch(ts []gpu.Task) error {
	if s.d.Lost() {
		return s.d.err
	}
	return s.in.LaunchBatch(ts)
}

// Wait waits on the wrapped event of a wrapper's event, so that a wait
// on the same device stays on the device.
func (s *stream) Wait(e gpu.Event) error {
	if s.d.Lost() {
		return s.d.err
	}
	if fe, ok := e.(*event); ok {
		e = fe.in
	}
	return s.in.Wait(e)
}

func (s *stream) Synchronize(ctx context.Context) error {
	err := s.in.Synchronize(ctx)
	if s.d.Lost() && ctx.Err() == nil {
		return errors.Join(err, s.d.err)
	}
	return err
}

// Record records on the wrapped stream; once the device is lost, the
// event reports the lost commands it covers, or the loss itself.
func (s *stream) Record() gpu.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := s.in.Record()
	if !s.d.Lost() {
		return ev
	}
	fe := &event{in: ev, s: s}
	for _, seq := range s.pending {
		if seq != 0 {
			fe.errs = append(fe.errs, &gpu.CommandError{Device: s.in.Device(), Stream: s.in.Index(), Seq: seq, Label: "lost", Err: s.d.err})
		}
	}
	if fe.errs == nil {
		fe.errs = []error{fmt.Errorf("faultdev: %s stream %d: marker: %w", s.in.Device(), s.in.Index(), s.d.err)}
	}
	s.pending = nil
	return fe
}

// event is an event recorded after the loss: it fires with the wrapped
// one and reports the loss beside the failures that one reports.
type event struct {
	in   gpu.Event
	s    *stream
	errs []error
}

func (e *event) Done() bool { return e.in.Done() }

func (e *event) Wait(ctx context.Context) error {
	err := e.in.Wait(ctx)
	if !e.in.Done() {
		return err // ctx is done
	}
	return errors.Join(append([]error{err}, e.errs...)...)
}
