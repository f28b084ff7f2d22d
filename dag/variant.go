package dag

import (
	"fmt"
	"slices"
	"strings"

	"github.com/streamdag/streamdag/buffers"
)

// CodeKind names a kind of kernel code: HostCode for a kernel's Go
// function, and for device code the name that the devices running it
// declare (gpu.CodeDevice's Code): OpenCLCode for OpenCL C, or any other
// kind a driver names, with no change here. The zero CodeKind, "", is no
// kind.
type CodeKind string

const (
	// HostCode is a kernel's Go function (its KernelFunc, Kernel.Fn): run
	// by devices with host-addressable memory (a gpu.Device that is no
	// gpu.CodeDevice: the CPU device, simulated GPUs).
	HostCode CodeKind = "go"
	// OpenCLCode is OpenCL C source (see OpenCL), run by OpenCL devices.
	OpenCLCode CodeKind = "opencl"
)

// Variant is a kernel's device code of one CodeKind other than HostCode,
// as Kernel.Variants and Graph.KernelVariants return it: a read-only view
// of what the graph stores (do not modify its Args). The host variant is
// the kernel's KernelFunc, not a Variant.
type Variant struct {
	Kind   CodeKind
	Source string    // program source, in the kind's language (OpenCL C for OpenCLCode)
	Entry  string    // the entry point (OpenCL C: the name of the __kernel function)
	Shape  ShapeFunc // the launch shape from the arguments' sizes
	// Args bind the entry point's arguments, in order. In a kernel's
	// variant a buffer argument holds the byte range it binds (see
	// BufferArg).
	Args []Arg
}

// Shape is the index space of one launch of device code (OpenCL's
// NDRange): Global work items per dimension, 1 to 3 dimensions, each >= 0
// (a zero runs no work item), and optionally the work-group size per
// dimension: nil lets the device choose, else as many entries as Global,
// each >= 1 and dividing its Global entry.
type Shape struct {
	Global []int
	Local  []int
}

// Check returns nil for a launchable shape (see Shape), else an error
// saying what is wrong.
func (s Shape) Check() error {
	if len(s.Global) < 1 || len(s.Global) > 3 {
		return fmt.Errorf("dag: launch shape with %d dimensions: want 1 to 3", len(s.Global))
	}
	if s.Local != nil && len(s.Local) != len(s.Global) {
		return fmt.Errorf("dag: launch shape with %d global and %d local dimensions", len(s.Global), len(s.Local))
	}
	for i, n := range s.Global {
		if n < 0 {
			return fmt.Errorf("dag: launch shape: negative global size %d in dimension %d", n, i)
		}
		if s.Local != nil && (s.Local[i] < 1 || n%s.Local[i] != 0) {
			return fmt.Errorf("dag: launch shape: local size %d does not divide global size %d in dimension %d", s.Local[i], n, i)
		}
	}
	return nil
}

// ShapeFunc gives a launch's shape from the sizes of its arguments:
// argBytes[i] is the length in bytes of the range argument i binds (0 for
// a scalar). The executor calls it before enqueueing the launch, once per
// plan (a plan's sizes are fixed) or per launch; it must be a pure
// function of argBytes, safe to call from any
// goroutine. A shape that fails Shape.Check fails the launch.
type ShapeFunc func(argBytes []int64) Shape

// Arg binds one argument of a device entry point: a buffer the kernel
// declares (BufferArg), a scalar (ScalarArg) or the launch's status word
// (StatusArg). The zero Arg is an invalid argument, reported by Validate.
type Arg struct {
	bind   buffers.Binding // a buffer argument: the buffer, and in a kernel's variant the range bound
	scalar any             // a scalar argument's value
	kind   uint8           // argBuffer, argScalar or argStatus
}

const (
	argNone = iota
	argBuffer
	argScalar
	argStatus
)

// BufferArg binds the entry point's argument to buffer id, which the
// kernel must declare as a read or a write: the argument is a __global
// pointer to the first byte the kernel declares of id, and covers through
// the last (the hull of its declared reads and writes of id: a kernel
// that declares several ranges of id gets one pointer). The device code
// may touch only the bytes the kernel declares. Device code runs on raw
// buffers only: a kernel that reads or writes a value buffer runs its
// host code (exec's Plan reports an error naming the kernel and the
// buffer when it has none).
func BufferArg(id BufferID) Arg { return Arg{kind: argBuffer, bind: buffers.Binding{Buffer: id}} }

// ScalarArg binds the entry point's argument to a scalar value, passed by
// value: int32 (OpenCL C int), uint32 (uint), int64 (long), uint64
// (ulong), float32 (float) or float64 (double). Another type is recorded
// as a mistake of the kernel and reported by Validate.
func ScalarArg(v any) Arg { return Arg{kind: argScalar, scalar: v} }

// StatusArg binds the entry point's argument to the launch's status word:
// a __global int * to one int32 that the executor zeroes before the
// launch and reads after it. Device code reports a soft failure by
// storing a non-zero value there; the launch then fails with an error
// naming the kernel and the value, and its writes are tainted as for any
// failure. A variant has at most one status argument (Validate reports
// a second).
func StatusArg() Arg { return Arg{kind: argStatus} }

// Status reports whether the argument is the launch's status word
// (StatusArg).
func (a Arg) Status() bool { return a.kind == argStatus }

// Buffer returns the range a buffer argument binds (in an option, before
// it is bound to a kernel: only the buffer id is set) and true, or false
// for a scalar.
func (a Arg) Buffer() (buffers.Binding, bool) { return a.bind, a.kind == argBuffer }

// Scalar returns a scalar argument's value and true, or false for a
// buffer.
func (a Arg) Scalar() (any, bool) { return a.scalar, a.kind == argScalar }

// String describes the argument: "buffer 3 [0:64)" or "int32 7".
func (a Arg) String() string {
	switch a.kind {
	case argBuffer:
		return fmt.Sprintf("buffer %d [%d:%d)", a.bind.Buffer, a.bind.Offset, a.bind.End())
	case argScalar:
		return fmt.Sprintf("%T %v", a.scalar, a.scalar)
	case argStatus:
		return "status word"
	}
	return "invalid argument"
}

// OpenCL declares the kernel's OpenCL C variant: DeviceCode of kind
// OpenCLCode (see DeviceCode for the arguments, their mistakes and what
// the option allocates). A kernel may have an OpenCL variant beside its
// Go function or instead of it (AddKernel with a nil function: the
// kernel then runs only on an OpenCL device). Where it runs: on an
// executor with an OpenCL device, a kernel with OpenCL C runs there
// (the OpenCL C) unless it is pinned (OnDevice) or has a preference
// (PreferDevice) elsewhere, or has an Estimate, in which case the cost
// model chooses among every device its code runs on; with no OpenCL
// device, its Go function runs. The source is compiled by the device
// that runs it, not here.
func OpenCL(source, entry string, shape ShapeFunc, args ...Arg) KernelOption {
	return DeviceCode(OpenCLCode, source, entry, shape, args...)
}

// DeviceCode declares the kernel's device-code variant of kind: program
// source in the kind's language, the entry point, the launch shape as a
// function of the arguments' sizes, and the entry point's arguments in
// order. An executor runs it on the devices whose code is kind (a
// gpu.CodeDevice whose Code is string(kind)); a kernel may have one
// variant per kind, beside its Go function or instead of it.
//
// Mistakes are recorded and reported by Validate, naming the kernel: an
// empty kind or HostCode (host code is the kernel's Go function), an
// empty source or entry point, a nil shape, an argument that names a
// buffer the kernel does not declare, a scalar of a type ScalarArg does
// not list, two variants of one kind on one kernel.
//
// Besides the option itself, DeviceCode allocates a copy of its
// arguments, made once per call (the option may then be reused for any
// number of kernels, as any option). A kernel given a variant stores it
// in a side table; kernels without one cost nothing more.
func DeviceCode(kind CodeKind, source, entry string, shape ShapeFunc, args ...Arg) KernelOption {
	v := &Variant{Kind: kind, Source: source, Entry: entry, Shape: shape, Args: slices.Clone(args)}
	return declare(kernelDecl{kind: optVariant, variant: v})
}

// bindVariants returns kernel k's copies of the variants among opts, and
// records their mistakes. It copies each variant out of its option rather
// than keeping the option's pointer, which the option shares with every
// kernel it is given to.
func (g *Graph) bindVariants(k KernelID, opts []kernelDecl, reads, writes []buffers.Binding) []Variant {
	var vs []Variant
	for i := range opts {
		if opts[i].kind != optVariant {
			continue
		}
		v := *opts[i].variant
		if slices.ContainsFunc(vs, func(w Variant) bool { return w.Kind == v.Kind }) {
			g.errs = append(g.errs, fmt.Errorf("dag: kernel %q has two %s variants", g.KernelName(k), v.Kind))
			continue
		}
		vs = append(vs, g.bindVariant(k, v, reads, writes))
	}
	return vs
}

// bindVariant returns kernel k's copy of the variant v with each buffer
// argument bound to the hull of k's declared accesses of its buffer, and
// records v's mistakes.
func (g *Graph) bindVariant(k KernelID, v Variant, reads, writes []buffers.Binding) Variant {
	name := g.KernelName(k)
	switch v.Kind {
	case "":
		g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: device-code variant of no kind", name))
	case HostCode:
		g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: device-code variant of kind %q: host code is the kernel's Go function", name, HostCode))
	}
	if v.Source == "" {
		g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: %s variant with an empty source", name, v.Kind))
	}
	if v.Entry == "" {
		g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: %s variant with an empty entry point", name, v.Kind))
	}
	if v.Shape == nil {
		g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: %s variant with a nil launch shape", name, v.Kind))
	}
	out := v
	out.Args = slices.Clone(v.Args)
	status := 0
	for i := range out.Args {
		a := &out.Args[i]
		switch a.kind {
		case argBuffer:
			if bd, ok := hull(a.bind.Buffer, reads, writes); ok {
				a.bind = bd
				continue
			}
			what := fmt.Sprintf("buffer id %d", a.bind.Buffer)
			if b := a.bind.Buffer; b >= 0 && int(b) < len(g.brecs) {
				what = fmt.Sprintf("buffer %q", g.bufferName(int(b)))
			}
			g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: %s argument %d binds %s, which the kernel neither reads nor writes",
				name, v.Kind, i, what))
		case argScalar:
			switch a.scalar.(type) {
			case int32, uint32, int64, uint64, float32, float64:
			default:
				g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: %s argument %d is a scalar of type %T: want int32, uint32, int64, uint64, float32 or float64",
					name, v.Kind, i, a.scalar))
			}
		case argStatus:
			if status++; status == 2 {
				g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: %s argument %d is a second status word", name, v.Kind, i))
			}
		default:
			g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: %s argument %d is neither a buffer, a scalar nor a status word (the zero Arg)", name, v.Kind, i))
		}
	}
	return out
}

// hull returns the smallest range of buffer b covering every binding of
// it in reads and writes, and false when there is none.
func hull(b BufferID, reads, writes []buffers.Binding) (buffers.Binding, bool) {
	var lo, hi int64
	found := false
	for _, bd := range [2][]buffers.Binding{reads, writes} {
		for _, x := range bd {
			if x.Buffer != b {
				continue
			}
			if !found {
				lo, hi, found = x.Offset, x.End(), true
			} else {
				lo, hi = min(lo, x.Offset), max(hi, x.End())
			}
		}
	}
	return buffers.Binding{Buffer: b, Offset: lo, Length: hi - lo}, found
}

// HasCode reports whether the kernel has code of kind: a Go function for
// HostCode, a variant of that kind otherwise.
func (k Kernel) HasCode(kind CodeKind) bool {
	if kind == HostCode {
		return k.Fn != nil
	}
	return slices.ContainsFunc(k.Variants, func(v Variant) bool { return v.Kind == kind })
}

// Codes returns the kinds of code the kernel has, host code first, then
// its variants in declaration order, as "go, opencl" ("none" when it has
// none): for messages.
func (k Kernel) Codes() string {
	var kinds []string
	if k.Fn != nil {
		kinds = append(kinds, string(HostCode))
	}
	for _, v := range k.Variants {
		kinds = append(kinds, string(v.Kind))
	}
	if kinds == nil {
		return "none"
	}
	return strings.Join(kinds, ", ")
}

// KernelVariants returns the device variants of kernel id (as
// Kernel.Variants) without making its whole view: nil when it has none.
// It panics when id is out of range. O(1), no allocation.
func (g *Graph) KernelVariants(id KernelID) []Variant {
	if r := g.krecs[id]; r.extra != 0 {
		return g.extras[r.extra-1].variants
	}
	return nil
}
