package bench

import "github.com/streamdag/streamdag/dag"

// floorKernel and floorBuffer are records the size of dag's own (32
// bytes with the kernel's function, 16 bytes with no pointer).
type (
	floorKernel struct {
		fn                              dag.KernelFunc
		name, chunk, off, nr, nw, extra uint32
	}
	floorBuffer struct {
		name, flags uint32
		size        int64
	}
)

// floorBinding is the size of a buffers.Binding (24 bytes).
type floorBinding struct{ buffer, offset, length int64 }

// ChainFloor does what building Chain(n) stores, and nothing else: per
// kernel, the same two names formatted and copied, and records, node ids
// and bindings of the same sizes appended to presized slices, with no
// checks and no options. It is what any
// graph store holding the same data costs on the machine at hand, the
// floor to set dag's build cost against. It returns a count of what it
// stored, so the work cannot be optimised away.
func ChainFloor(n int) int {
	var (
		ks    = make([]floorKernel, 0, n)
		bs    = make([]floorBuffer, 0, n)
		nodes = make([]int32, 0, 2*n)
		kn    = make([]byte, 0, 8*n)
		bn    = make([]byte, 0, 8*n)
		binds []floorBinding
		sum   int
	)
	for i := range n {
		if len(binds)+2 > cap(binds) {
			sum += len(binds)
			binds = make([]floorBinding, 0, 4096)
		}
		nb := uint32(len(bn))
		bn = append(bn, name("b", i)...)
		bs = append(bs, floorBuffer{name: nb, flags: 1})
		nodes = append(nodes, int32(^i))
		nk := uint32(len(kn))
		kn = append(kn, name("k", i)...)
		off := uint32(len(binds))
		binds = append(binds, floorBinding{buffer: int64(i), length: 1})
		nr := uint32(0)
		if i > 0 {
			binds = append(binds, floorBinding{buffer: int64(i - 1), length: 1})
			nr = 1
		}
		ks = append(ks, floorKernel{fn: Empty, name: nk, off: off, nr: nr, nw: 1})
		nodes = append(nodes, int32(i))
	}
	return sum + len(binds) + len(ks) + len(bs) + len(nodes) + len(kn) + len(bn)
}
