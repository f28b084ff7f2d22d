package gpu

import (
	"fmt"

	"github.com/streamdag/streamdag/topology"
)

// Memory is device memory: an opaque allocation of Bytes bytes on one
// device, made by CodeDevice.Alloc. It is not addressable from Go; bytes
// move in and out through a CodeStream's copies. Release frees it once
// the commands already enqueued on it have finished; it is idempotent,
// and a released Memory given to a command is an error (ErrClosed).
// Methods are safe for concurrent use.
type Memory interface {
	// Device is the device the memory lives on.
	Device() topology.DeviceID
	// Bytes is the allocation's size in bytes.
	Bytes() int64
	// Release frees the memory (see the type's doc).
	Release() error
	// Zero makes the memory read as zeroes to every command that any
	// stream enqueues on it after Zero returns: the device zeroes it
	// ordered before those commands, without blocking the caller. The
	// commands enqueued on it before must have finished (an event
	// recorded after them has fired). A failure the device reports for
	// the zeroing comes from the Wait of an event recorded after such a
	// command. Errors: released memory (ErrClosed), a lost or closed
	// device.
	Zero() error
}

// Program is device code built for one device (CodeDevice.Program): the
// entry points a KernelLaunch names come from it. It is released with
// its device.
type Program interface {
	// Name is the name the program was built under, for errors.
	Name() string
}

// KernelArg is one argument of a device entry point: device memory (a
// __global pointer to Mem's byte Offset, in [0, Mem.Bytes()), or 0 for
// zero-byte memory, which binds a NULL pointer) or, when Mem is nil, the
// scalar Scalar, one of int32, uint32, int64, uint64, float32 or
// float64. An offset that is not a multiple of the device's
// ArgAlignBytes, an argument that does not match the entry point's
// parameter (memory for a scalar, a scalar for a pointer, a scalar of
// another size) and an argument count other than the entry point's are
// errors of LaunchKernel naming the kernel and the argument.
type KernelArg struct {
	Mem    Memory // device memory, or nil for a scalar
	Offset int64  // bytes into Mem
	Scalar any    // the scalar when Mem is nil
}

// KernelLaunch is one launch of device code: entry point Entry of
// Program over Global work items per dimension (1 to 3 dimensions), in
// work-groups of Local (nil: the device chooses), with Args bound in
// order. Label names the launch in errors the device reports after the
// fact, for people (an executor puts the kernel's name there); a failure
// is told apart from others by its sequence number (see CodeStream), not
// by its label.
type KernelLaunch struct {
	Program Program     // built on the stream's device
	Entry   string      // the entry point's name in Program
	Global  []int       // work items per dimension, 1 to 3 dimensions
	Local   []int       // work-group size per dimension; nil: the device chooses
	Args    []KernelArg // in the entry point's parameter order
	Label   string      // for people, in errors
}

// CodeDevice is a device that runs device code on memory of its own (an
// OpenCL device): besides host tasks, its streams are CodeStreams.
// Methods are safe for concurrent use.
type CodeDevice interface {
	Device
	// Code is the kind of device code the device runs, as kernels'
	// variants name it (exec runs on the device a kernel's variant of
	// this kind): "opencl" for OpenCL C, or any other non-empty name a
	// driver gives its code. It is constant for the device, and never
	// "go", the host code (a kernel's Go function) that a Device which
	// is no CodeDevice runs.
	Code() string
	// Alloc makes bytes (>= 0) of device memory that reads as zeroes
	// (as after Memory.Zero), as the CPU device's buffers do. The
	// allocation counts against the device's memory; errors name the
	// device and the size.
	Alloc(bytes int64) (Memory, error)
	// ArgAlignBytes is the alignment in bytes a KernelArg's Offset needs
	// on the device (OpenCL's CL_DEVICE_MEM_BASE_ADDR_ALIGN); 0 or 1:
	// any offset.
	ArgAlignBytes() int64
	// Program builds source (compiler options may be empty) for the
	// device, or returns the program already built from the same source
	// and options. It blocks while the compiler runs. A compile error
	// carries the compiler's log and name.
	Program(name, source, options string) (Program, error)
}

// CodeStream is a stream of a CodeDevice. Every method enqueues and
// returns without waiting for the device: commands run in enqueue order,
// after the waits enqueued before them (Stream.Wait), and host tasks
// (Stream.Launch) run in the same order. A failure the device reports
// after the fact comes from the Wait of an Event recorded after the
// command, as a *CommandError naming the device, the stream, the
// command's sequence number and its label.
//
// The enqueue methods below return the sequence number of the command
// they enqueued: per stream, increasing with each command (from 1; the
// stream's own commands, such as its waits' markers, take numbers too, so
// the numbers need not be consecutive), and the one the CommandError of a
// failure of that command names in Seq, so a caller maps a reported
// failure back to what it enqueued by number. A call that enqueues no
// command (a zero-byte copy or fill) returns 0, which no CommandError
// names; a call that returns an error enqueued nothing and returns 0.
type CodeStream interface {
	Stream
	// LaunchKernel enqueues k. Errors: a shape the device cannot run
	// (a size past the device's size_t or a work-group past its limits,
	// naming k's label), a bad argument (see KernelArg), a program of
	// another device, ErrClosed.
	LaunchKernel(k *KernelLaunch) (seq uint64, err error)
	// CopyIn enqueues a copy of src into dst at off (host to device).
	// src must stay unchanged until an event recorded after the call
	// has fired.
	CopyIn(dst Memory, off int64, src []byte) (seq uint64, err error)
	// CopyOut enqueues a copy of len(dst) bytes of src at off into dst
	// (device to host); dst holds them once an event recorded after
	// the call has fired.
	CopyOut(dst []byte, src Memory, off int64) (seq uint64, err error)
	// Copy enqueues a copy of n bytes from src at srcOff to dst at
	// dstOff; both on this stream's device.
	Copy(dst Memory, dstOff int64, src Memory, srcOff, n int64) (seq uint64, err error)
	// Fill enqueues writing pattern (1, 2, 4, …, 128 bytes) over
	// [off, off+n) of dst; off and n are multiples of its length.
	Fill(dst Memory, off, n int64, pattern []byte) (seq uint64, err error)
	// CommandEvent returns an event that fires once the stream's
	// command seq (a number an enqueue method returned) and every
	// command enqueued on the stream before it have completed, and
	// true: an event the stream recorded (Record) after the command,
	// which may cover later commands too and reports what that event
	// reports, so another stream of the device can Wait on it on the
	// device. It returns nil and false when the stream has none: no
	// Record after the command yet, seq 0 or never returned, or a
	// device that no longer keeps its events (a lost one may not). It
	// enqueues nothing and never blocks; safe for concurrent use with
	// the stream's other methods.
	CommandEvent(seq uint64) (Event, bool)
}

// CommandError is a command that a device reported failed after it was
// enqueued: the device, the stream, the command's sequence number on the
// stream (from 1: the number its CodeStream enqueue method returned), its
// label ("launch filter", "copy in") and the device's error.
type CommandError struct {
	Device topology.DeviceID // the device that reported it
	Stream int               // the stream's index on Device
	Seq    uint64            // the command's sequence number on the stream, from 1
	Label  string            // the command's label ("launch filter", "copy in")
	Err    error             // the device's error
}

// Error returns "gpu: opencl0 stream 1 command 7 (launch filter) failed: …".
func (e *CommandError) Error() string {
	return fmt.Sprintf("gpu: %s stream %d command %d (%s) failed: %v", e.Device, e.Stream, e.Seq, e.Label, e.Err)
}

// Unwrap returns the device's error.
func (e *CommandError) Unwrap() error { return e.Err }

// Abandoner is a CodeDevice that can give up on commands it cannot
// interrupt, such as a kernel that never ends. Abandon marks the device
// unusable with cause: every later call that enqueues work on it, and
// Alloc, returns an error wrapping cause (a list is still taken, and its
// publishes answer that error, as on a lost device: see Lister); events
// already recorded still fire if their commands ever finish; and Close,
// instead of waiting for the abandoned commands without bound, returns
// an error after a bounded wait, leaking what those commands hold (the
// device's queues and their goroutines, its memory, the host memory
// pinned for copies). Abandon is idempotent (the first cause is kept)
// and safe for concurrent use.
type Abandoner interface {
	Abandon(cause error)
}
