package dag

import (
	"time"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/topology"
)

// KernelOption configures a kernel in AddKernel: its reads, writes,
// placement hints and device variants. Options are made by Reads, Writes,
// ReadsOptional, ReadsRange, WritesRange, OnStream, OnDevice,
// PreferDevice, Estimate, OpenCL and DeviceCode. AddKernel applies them
// in order, so reads and writes keep their declaration order across
// several options, and of two hints of one kind the later wins. An
// option's error, and every mistake an option declares (an unknown
// buffer, a negative stream, …), is recorded by AddKernel and reported by
// Validate, naming the kernel; a nil option is skipped.
//
// An option is a function value: making one allocates it (and keeps the
// id slice given to Reads, Writes or ReadsOptional, which AddKernel
// copies into the graph). It may be kept and reused for any number of
// kernels of any graph, from any goroutine (as long as that id slice is
// not changed meanwhile).
type KernelOption func(*kernelSpec) error

// kernelSpec gathers what a kernel's options declare, in order.
type kernelSpec struct {
	decls []kernelDecl
}

// declare returns the option that declares d.
func declare(d kernelDecl) KernelOption {
	return func(s *kernelSpec) error {
		s.decls = append(s.decls, d)
		return nil
	}
}

// kernelDecl is one declaration of a kernel option.
type kernelDecl struct {
	kind     optKind
	ids      []BufferID        // optReads, optReadsOptional, optWrites
	rng      buffers.Binding   // optReadsRange, optWritesRange
	stream   int               // optStream
	device   topology.DeviceID // optDevice, optPrefer
	estimate time.Duration     // optEstimate
	variant  *Variant          // optVariant
}

// optKind says what a kernelDecl declares.
type optKind uint8

const (
	optNone optKind = iota
	optReads
	optReadsOptional
	optReadsRange
	optWrites
	optWritesRange
	optStream
	optDevice
	optPrefer
	optEstimate
	optVariant
)

// Reads declares whole-buffer reads of ids (AddBuffer's ids, or a Value
// handle's ID), in order. An id that is not a buffer of the graph is
// recorded and reported by Validate.
func Reads(ids ...BufferID) KernelOption { return declare(kernelDecl{kind: optReads, ids: ids}) }

// Writes declares whole-buffer writes of ids (as Reads), in order. An id
// that is not a buffer of the graph is recorded and reported by Validate.
func Writes(ids ...BufferID) KernelOption { return declare(kernelDecl{kind: optWrites, ids: ids}) }

// ReadsOptional declares whole-buffer reads of ids, in order, that the
// kernel can do without: when one was left unwritten by failed or skipped
// work the launch still runs, Launch.Missing(id) says what is missing and
// why, and the kernel's output is its own responsibility (a merge that
// reports the partitions it lost, say). Ordering is as for Reads.
func ReadsOptional(ids ...BufferID) KernelOption {
	return declare(kernelDecl{kind: optReadsOptional, ids: ids})
}

// ReadsRange declares a read of bytes [offset, offset+length) of buffer id.
// A range outside the buffer is recorded and reported by Validate. The
// range decides which bytes the read needs (which writes it must follow,
// and which failures taint it), not the kernels' order: kernels are
// ordered through whole buffers, so a kernel that also writes id (any
// range, even one disjoint from this) makes a cycle (*CycleError); to
// update part of a buffer from another part, write a second buffer.
func ReadsRange(id BufferID, offset, length int64) KernelOption {
	return declare(kernelDecl{kind: optReadsRange, rng: buffers.Binding{Buffer: id, Offset: offset, Length: length}})
}

// WritesRange declares a write of bytes [offset, offset+length) of buffer
// id. A range outside the buffer is recorded and reported by Validate.
// Writers of disjoint ranges need no order between them; writers of
// overlapping ranges need a path between them (*WriteConflictError).
// A kernel that also reads id, at any range, makes a cycle (see
// ReadsRange).
func WritesRange(id BufferID, offset, length int64) KernelOption {
	return declare(kernelDecl{kind: optWritesRange, rng: buffers.Binding{Buffer: id, Offset: offset, Length: length}})
}

// OnStream pins the kernel to stream i of its device (taken modulo the
// device's stream count; i >= 0). A negative i is recorded and reported by
// Validate.
func OnStream(i int) KernelOption { return declare(kernelDecl{kind: optStream, stream: i}) }
