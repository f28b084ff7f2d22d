// Package dag describes a pipeline: the kernels to run and the buffers they
// read and write, as a graph that is validated before it runs (layer 2).
//
// It holds kernels and buffers as a gonum directed graph, their declared
// reads and writes, validation with errors that name things, and DOT export.
//
// A [Graph] is built with [Graph.AddBuffer], [AddValue] and
// [Graph.AddKernel]. Nodes are kernels and buffers; an edge buffer→kernel
// is a read, an edge kernel→buffer a write. The graph is exposed
// ([Graph.Directed]) so gonum's algorithms apply to it.
//
// A running kernel reaches its buffers by the handles that declared
// them, not by position: [AddValue] returns a typed [Value] handle, and
// the kernel calls [Get] and [Put] on it (the compiler checks the value's
// type); a raw buffer's id ([Graph.AddBuffer]) gives its bytes through
// [Bytes]. Asking for a buffer the kernel did not declare with that
// access, or a value of another type, is an error ([AccessError]), never
// a panic.
//
// A kernel's code is its host variant (a [KernelFunc], run by the CPU
// device and by simulated GPUs) and/or device variants, one per kind of
// device code: OpenCL C ([OpenCL]) or any other kind ([DeviceCode]):
// source, entry point, launch [Shape] from the arguments' sizes, and
// [Arg] bindings of its declared buffers and scalars. A kind of code
// ([CodeKind]) is data: [HostCode] ("go") for the Go function, and for
// device code the name its devices declare ("opencl", or a new driver's
// own), so a new kind needs no change here; the executor places a kernel
// only on devices that run code it has. Device variants live in a side
// record of the kernels that have them.
//
// Building and validating a graph is a pure description: it starts no
// goroutine and touches no device. Builder calls never fail on the spot;
// mistakes (a duplicate name, an unknown buffer, a range outside its buffer)
// are recorded and reported by [Graph.Validate] together with the graph's
// structural errors (cycles, buffers read but never written, unordered
// writers of one byte range).
//
// Kernels are ordered through whole buffers: a kernel comes after every
// writer of a buffer it reads, whatever byte ranges the two declare
// ([ReadsRange], [WritesRange]). Ranges decide which bytes a read needs
// and which writes conflict, never the order, so a kernel that reads and
// writes one buffer, even disjoint ranges of it, is a cycle
// ([CycleError]); a kernel that updates part of a buffer from another
// part writes a second buffer instead.
//
// Building is cheap enough for graphs of millions of kernels. A
// [KernelOption] or [BufferOption] is a function value (making one is one
// small allocation; an option may be made once and reused). A graph
// stores kernels and buffers as small records (32 and 16 bytes) and
// copies names and bindings into arenas of its own, so AddValue and
// AddKernel allocate nothing of their own per call, amortised, and a name
// formatted on the caller's stack may stay there.
// [Graph.Grow]
// presizes a graph whose size is known. [Graph.Kernel] and [Graph.Buffer]
// return read-only views made from the records on demand. The gonum graph
// is built only when first asked for, and Validate works in a few flat
// arrays.
//
// A Graph is not safe for concurrent mutation. Once validated it may be
// read (and executed) by several goroutines at once, as long as nobody
// adds to it.
package dag
