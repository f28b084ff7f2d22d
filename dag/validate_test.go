package dag_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
)

// problems returns the errors Validate joined, in order.
func problems(t *testing.T, err error) []error {
	t.Helper()
	require.Error(t, err)
	joined, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok, "Validate returned %T, want an errors.Join error", err)
	return joined.Unwrap()
}

// typed checks that err holds an error of want's type (via errors.As) equal
// to want, field by field.
func typed[E error](want E) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var got E
		require.ErrorAs(t, err, &got)
		assert.Equal(t, want, got)
	}
}

// message checks the text of a problem that has no error type of its own.
func message(want string) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		assert.EqualError(t, err, want)
	}
}

func TestValidateProblems(t *testing.T) {
	tests := []struct {
		name  string
		build func(g *dag.Graph)
		want  func(*testing.T, error)
	}{
		{
			name: "duplicate kernel names",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8, dag.Input())
				g.AddKernel("k", nop, dag.Reads(x))
				g.AddKernel("k", nop, dag.Reads(x))
			},
			want: typed(&dag.DuplicateError{Name: "k", Kinds: [2]string{"kernel", "kernel"}}),
		},
		{
			name: "kernel named like a buffer",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8, dag.Input())
				g.AddKernel("x", nop, dag.Reads(x))
			},
			want: typed(&dag.DuplicateError{Name: "x", Kinds: [2]string{"buffer", "kernel"}}),
		},
		{
			name: "buffer named like a kernel",
			build: func(g *dag.Graph) {
				g.AddKernel("k", nop)
				dag.AddValue[any](g, "k", dag.Input()).ID()
			},
			want: typed(&dag.DuplicateError{Name: "k", Kinds: [2]string{"kernel", "buffer"}}),
		},
		{
			name: "empty kernel name",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8, dag.Input())
				g.AddKernel("first", nop, dag.Reads(x))
				g.AddKernel("", nop, dag.Reads(x))
			},
			want: message("dag: kernel 1 has an empty name"),
		},
		{
			name: "empty buffer name",
			build: func(g *dag.Graph) {
				g.AddKernel("k", nop)
				g.AddBuffer("", 8, dag.Input())
			},
			want: message("dag: buffer 0 has an empty name"),
		},
		{
			name: "nil function",
			build: func(g *dag.Graph) {
				g.AddKernel("k", nil)
			},
			want: message(`dag: kernel "k" has no code: a nil function and no device variant`),
		},
		{
			name: "read of an unknown buffer id",
			build: func(g *dag.Graph) {
				g.AddBuffer("x", 8, dag.Input())
				g.AddKernel("k", nop, dag.Reads(7))
			},
			want: message(`dag: kernel "k" reads unknown buffer id 7`),
		},
		{
			name: "write range of a negative buffer id",
			build: func(g *dag.Graph) {
				g.AddKernel("k", nop, dag.WritesRange(-1, 0, 4))
			},
			want: message(`dag: kernel "k" writes unknown buffer id -1`),
		},
		{
			name: "write range past the end of its buffer",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("k", nop, dag.WritesRange(x, 4, 8))
			},
			want: message(`dag: kernel "k" writes [4:12) of buffer "x", which has 8 bytes`),
		},
		{
			name: "read range at a negative offset",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8, dag.Input())
				g.AddKernel("k", nop, dag.ReadsRange(x, -2, 4))
			},
			want: message(`dag: kernel "k" reads [-2:2) of buffer "x", which has 8 bytes`),
		},
		{
			name: "read range whose end overflows int64",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8, dag.Input())
				g.AddKernel("k", nop, dag.ReadsRange(x, math.MaxInt64, 2))
			},
			want: message(`dag: kernel "k" reads [9223372036854775807:9223372036854775807+2) of buffer "x", which has 8 bytes`),
		},
		{
			name: "read range of two bytes of a value buffer",
			build: func(g *dag.Graph) {
				v := dag.AddValue[any](g, "batch", dag.Input()).ID()
				g.AddKernel("k", nop, dag.ReadsRange(v, 0, 2))
			},
			want: message(`dag: kernel "k" reads [0:2) of buffer "batch", which has 1 bytes`),
		},
		{
			name: "negative buffer size",
			build: func(g *dag.Graph) {
				g.AddBuffer("x", -1)
			},
			want: message(`dag: buffer "x": negative size -1`),
		},
		{
			name: "negative stream",
			build: func(g *dag.Graph) {
				g.AddKernel("k", nop, dag.OnStream(-1))
			},
			want: message(`dag: kernel "k": negative stream -1`),
		},
		{
			name: "cycle through two kernels",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				y := g.AddBuffer("y", 8)
				g.AddKernel("a", nop, dag.Reads(x), dag.Writes(y))
				g.AddKernel("b", nop, dag.Reads(y), dag.Writes(x))
			},
			want: typed(&dag.CycleError{Path: []string{
				"kernel a", "buffer y", "kernel b", "buffer x", "kernel a",
			}}),
		},
		{
			name: "cycle starts at its lowest kernel, not at the first node",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				y := g.AddBuffer("y", 8)
				g.AddKernel("b", nop, dag.Reads(y), dag.Writes(x))
				g.AddKernel("a", nop, dag.Reads(x), dag.Writes(y))
			},
			want: typed(&dag.CycleError{Path: []string{
				"kernel b", "buffer x", "kernel a", "buffer y", "kernel b",
			}}),
		},
		{
			name: "kernel reads and writes one buffer",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("a", nop, dag.Reads(x), dag.Writes(x))
			},
			want: typed(&dag.CycleError{Path: []string{"kernel a", "buffer x", "kernel a"}}),
		},
		{
			name: "read of a buffer nobody writes",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("k", nop, dag.Reads(x))
			},
			want: typed(&dag.NoWriterError{Kernel: "k", Buffer: "x", Offset: 0, End: 8}),
		},
		{
			name: "read of a value buffer nobody writes",
			build: func(g *dag.Graph) {
				v := dag.AddValue[any](g, "batch").ID()
				g.AddKernel("k", nop, dag.Reads(v))
			},
			want: typed(&dag.NoWriterError{Kernel: "k", Buffer: "batch", Offset: 0, End: 1}),
		},
		{
			name: "partial write leaves a gap at the end",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("w", nop, dag.WritesRange(x, 0, 4))
				g.AddKernel("r", nop, dag.Reads(x))
			},
			want: typed(&dag.NoWriterError{Kernel: "r", Buffer: "x", Offset: 4, End: 8}),
		},
		{
			name: "two writes leave a gap in the middle",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("hi", nop, dag.WritesRange(x, 6, 2))
				g.AddKernel("lo", nop, dag.WritesRange(x, 0, 2))
				g.AddKernel("r", nop, dag.ReadsRange(x, 1, 6))
			},
			want: typed(&dag.NoWriterError{Kernel: "r", Buffer: "x", Offset: 2, End: 6}),
		},
		{
			name: "unordered writers of overlapping ranges",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("w1", nop, dag.WritesRange(x, 0, 6))
				g.AddKernel("w2", nop, dag.WritesRange(x, 4, 4))
			},
			want: typed(&dag.WriteConflictError{Buffer: "x", Kernels: [2]string{"w1", "w2"}, Offset: 4, End: 6}),
		},
		{
			name: "unordered writers of a whole value buffer",
			build: func(g *dag.Graph) {
				v := dag.AddValue[any](g, "batch").ID()
				g.AddKernel("w1", nop, dag.Writes(v))
				g.AddKernel("w2", nop, dag.Writes(v))
			},
			want: typed(&dag.WriteConflictError{Buffer: "batch", Kernels: [2]string{"w1", "w2"}, Offset: 0, End: 1}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := dag.New()
			tt.build(g)
			err := g.Validate()
			errs := problems(t, err)
			require.Len(t, errs, 1, "want exactly one problem, got: %v", err)
			tt.want(t, errs[0])
			tt.want(t, err) // errors.As also finds it through the join
			assert.Nil(t, g.Order(), "Order after a failed Validate")
		})
	}
}

func TestValidateValid(t *testing.T) {
	tests := []struct {
		name  string
		build func(g *dag.Graph)
		order []string
	}{
		{
			name:  "empty graph",
			build: func(*dag.Graph) {},
			order: []string{},
		},
		{
			name: "input buffers need no writer",
			build: func(g *dag.Graph) {
				raw := g.AddBuffer("raw", 8, dag.Input())
				v := dag.AddValue[any](g, "batch", dag.Input()).ID()
				g.AddKernel("k", nop, dag.Reads(raw, v))
			},
			order: []string{"k"},
		},
		{
			name: "writers of disjoint ranges",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("hi", nop, dag.WritesRange(x, 4, 4))
				g.AddKernel("lo", nop, dag.WritesRange(x, 0, 4))
				g.AddKernel("r", nop, dag.Reads(x))
			},
			order: []string{"hi", "lo", "r"},
		},
		{
			name: "read covered by the first of two writes",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("lo", nop, dag.WritesRange(x, 0, 4))
				g.AddKernel("hi", nop, dag.WritesRange(x, 4, 4))
				g.AddKernel("r", nop, dag.ReadsRange(x, 1, 2))
			},
			order: []string{"lo", "hi", "r"},
		},
		{
			name: "ordered writers of one buffer",
			build: func(g *dag.Graph) {
				b := g.AddBuffer("b", 8)
				d := g.AddBuffer("d", 8)
				g.AddKernel("w1", nop, dag.Writes(b, d))
				g.AddKernel("w2", nop, dag.Reads(d), dag.Writes(b))
			},
			order: []string{"w1", "w2"},
		},
		{
			name: "ordered writers added reader first",
			build: func(g *dag.Graph) {
				b := g.AddBuffer("b", 8)
				d := g.AddBuffer("d", 8)
				g.AddKernel("w2", nop, dag.Reads(d), dag.Writes(b))
				g.AddKernel("w1", nop, dag.Writes(b, d))
			},
			order: []string{"w1", "w2"},
		},
		{
			name: "empty read of an unwritten buffer",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("k", nop, dag.ReadsRange(x, 8, 0))
			},
			order: []string{"k"},
		},
		{
			name: "zero-size buffer",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 0)
				g.AddKernel("k", nop, dag.Reads(x))
			},
			order: []string{"k"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := dag.New()
			tt.build(g)
			require.NoError(t, g.Validate())
			assert.Equal(t, tt.order, orderNames(g))
		})
	}
}

func TestValidateMessages(t *testing.T) {
	g := dag.New()
	x := g.AddBuffer("x", 8)
	g.AddKernel("w1", nop, dag.WritesRange(x, 0, 6))
	g.AddKernel("w2", nop, dag.WritesRange(x, 4, 4))
	g.AddKernel("x", nop, dag.ReadsRange(x, 6, 2))
	err := g.Validate()
	assert.EqualError(t, err, `dag: duplicate name "x" (a buffer and a kernel)`+"\n"+
		`dag: kernels "w1" and "w2" both write bytes [4:6) of buffer "x" and neither is ordered before the other`)

	g = dag.New()
	x = g.AddBuffer("x", 8)
	g.AddKernel("w", nop, dag.WritesRange(x, 0, 4))
	g.AddKernel("r", nop, dag.Reads(x))
	assert.EqualError(t, g.Validate(),
		`dag: kernel "r" reads bytes [4:8) of buffer "x", which no kernel writes and which is not an input`)
}

func TestValidateReportsEveryCycle(t *testing.T) {
	g := dag.New()
	x := g.AddBuffer("x", 8)
	y := g.AddBuffer("y", 8)
	z := g.AddBuffer("z", 8)
	g.AddKernel("a", nop, dag.Reads(x), dag.Writes(y))
	g.AddKernel("self", nop, dag.Reads(z), dag.Writes(z))
	g.AddKernel("b", nop, dag.Reads(y), dag.Writes(x))
	g.AddKernel("after", nop, dag.Reads(y)) // downstream of a cycle, in none

	var paths [][]string
	for _, e := range problems(t, g.Validate()) {
		var ce *dag.CycleError
		require.ErrorAs(t, e, &ce, "every problem is a cycle, got %v", e)
		paths = append(paths, ce.Path)
	}
	assert.ElementsMatch(t, [][]string{
		{"kernel a", "buffer y", "kernel b", "buffer x", "kernel a"},
		{"kernel self", "buffer z", "kernel self"},
	}, paths)
}

func TestValidateLongerCycle(t *testing.T) {
	// A three-kernel ring: the path starts at the kernel with the lowest id
	// and follows the edges.
	g := dag.New()
	ab := g.AddBuffer("ab", 8)
	bc := g.AddBuffer("bc", 8)
	ca := g.AddBuffer("ca", 8)
	g.AddKernel("c", nop, dag.Reads(bc), dag.Writes(ca))
	g.AddKernel("a", nop, dag.Reads(ca), dag.Writes(ab))
	g.AddKernel("b", nop, dag.Reads(ab), dag.Writes(bc))

	var ce *dag.CycleError
	require.ErrorAs(t, g.Validate(), &ce)
	assert.Equal(t, []string{
		"kernel c", "buffer ca", "kernel a", "buffer ab", "kernel b", "buffer bc", "kernel c",
	}, ce.Path)
	assert.EqualError(t, ce,
		"dag: cycle: kernel c → buffer ca → kernel a → buffer ab → kernel b → buffer bc → kernel c"+
			" (kernels are ordered through whole buffers, whatever byte ranges they read and write)")
}

// A kernel that reads one range of a buffer and writes another, disjoint
// one is a cycle: kernels are ordered through whole buffers, and the
// error says so.
func TestValidateReadWriteOfOneBufferIsACycle(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(x dag.BufferID) []dag.KernelOption
	}{
		{"disjoint ranges", func(x dag.BufferID) []dag.KernelOption {
			return []dag.KernelOption{dag.ReadsRange(x, 0, 128), dag.WritesRange(x, 128, 128)}
		}},
		{"one range", func(x dag.BufferID) []dag.KernelOption {
			return []dag.KernelOption{dag.ReadsRange(x, 0, 128), dag.WritesRange(x, 0, 128)}
		}},
		{"whole buffer", func(x dag.BufferID) []dag.KernelOption {
			return []dag.KernelOption{dag.Reads(x), dag.Writes(x)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := dag.New()
			x := g.AddBuffer("x", 256, dag.Input())
			g.AddKernel("k", nop, tc.opts(x)...)
			err := g.Validate()
			var ce *dag.CycleError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, []string{"kernel k", "buffer x", "kernel k"}, ce.Path)
			assert.EqualError(t, err,
				"dag: cycle: kernel k → buffer x → kernel k (kernels are ordered through whole buffers, whatever byte ranges they read and write)")
			assert.Nil(t, g.Order())
		})
	}
}

func TestValidateBoundsProblems(t *testing.T) {
	for _, n := range []int{10, 11, 25} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			g := dag.New()
			for i := range n {
				g.AddKernel(fmt.Sprintf("k%d", i), nil)
			}
			errs := problems(t, g.Validate())
			if n <= 10 {
				assert.Len(t, errs, n)
				assert.EqualError(t, errs[n-1], fmt.Sprintf(`dag: kernel "k%d" has no code: a nil function and no device variant`, n-1))
				return
			}
			require.Len(t, errs, 11)
			for i, e := range errs[:10] {
				assert.EqualError(t, e, fmt.Sprintf(`dag: kernel "k%d" has no code: a nil function and no device variant`, i))
			}
			assert.EqualError(t, errs[10], fmt.Sprintf("dag: and %d more problems", n-10))
		})
	}
}

func TestValidateIsRepeatable(t *testing.T) {
	g := dag.New()
	x := g.AddBuffer("x", 8)
	g.AddKernel("w", nop, dag.Writes(x))
	require.NoError(t, g.Validate())
	require.NoError(t, g.Validate())
	assert.Equal(t, []string{"w"}, orderNames(g))

	g.AddKernel("r", nil, dag.Reads(x))
	first := g.Validate()
	second := g.Validate()
	require.Error(t, first)
	assert.Equal(t, first.Error(), second.Error(), "a builder mistake is reported on every Validate")
	assert.EqualError(t, first, `dag: kernel "r" has no code: a nil function and no device variant`)
	assert.Nil(t, g.Order())
}

func TestValidateManyWritersOfOneBuffer(t *testing.T) {
	// Writers w0..w9 of one buffer are ordered by a chain of tokens, added
	// in reverse so the order is not the id order; one more writer, loose,
	// is ordered with nobody and overlaps w3's and w4's ranges.
	g := dag.New()
	x := g.AddBuffer("x", 100)
	tok := make([]dag.BufferID, 10)
	for i := range tok {
		tok[i] = dag.AddValue[any](g, name("t", i)).ID()
	}
	for i := 9; i >= 0; i-- {
		opts := []dag.KernelOption{dag.WritesRange(x, int64(10*i), 10), dag.Writes(tok[i])}
		if i > 0 {
			opts = append(opts, dag.Reads(tok[i-1]))
		}
		g.AddKernel(name("w", i), nop, opts...)
	}
	g.AddKernel("loose", nop, dag.WritesRange(x, 35, 10))
	g.AddKernel("again", nop, dag.Reads(tok[9]), dag.WritesRange(x, 0, 100))
	g.AddKernel("r", nop, dag.Reads(x))

	errs := problems(t, g.Validate())
	var got []dag.WriteConflictError
	for _, e := range errs {
		var wc *dag.WriteConflictError
		require.ErrorAs(t, e, &wc, "only conflicts, got %v", e)
		got = append(got, *wc)
	}
	// "again" comes after every wN through the token chain, so it
	// conflicts only with "loose". Pairs come in write order (kernel ids).
	assert.Equal(t, []dag.WriteConflictError{
		{Buffer: "x", Kernels: [2]string{"w4", "loose"}, Offset: 40, End: 45},
		{Buffer: "x", Kernels: [2]string{"w3", "loose"}, Offset: 35, End: 40},
		{Buffer: "x", Kernels: [2]string{"loose", "again"}, Offset: 35, End: 45},
	}, got)
}

func TestValidateCoverageOfManyWrites(t *testing.T) {
	tests := []struct {
		name   string
		writes [][2]int64 // offset, length, added in this order
		read   [2]int64
		gap    [2]int64 // {0, 0}: none
	}{
		{"adjacent writes fuse", [][2]int64{{4, 4}, {0, 4}, {8, 8}}, [2]int64{0, 16}, [2]int64{}},
		{"overlapping writes fuse", [][2]int64{{6, 10}, {0, 8}}, [2]int64{2, 12}, [2]int64{}},
		{"gap before the first write", [][2]int64{{4, 4}, {10, 6}}, [2]int64{0, 16}, [2]int64{0, 4}},
		{"gap between writes", [][2]int64{{10, 6}, {0, 4}}, [2]int64{2, 12}, [2]int64{4, 10}},
		{"gap after the last write", [][2]int64{{0, 4}, {4, 4}}, [2]int64{6, 10}, [2]int64{8, 16}},
		{"empty writes cover nothing", [][2]int64{{0, 0}, {4, 0}, {0, 2}}, [2]int64{0, 4}, [2]int64{2, 4}},
		{"read inside one write of many", [][2]int64{{0, 2}, {4, 12}}, [2]int64{5, 3}, [2]int64{}},
		{"empty read needs nothing", [][2]int64{{0, 2}, {6, 2}}, [2]int64{4, 0}, [2]int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := dag.New()
			x := g.AddBuffer("x", 16)
			done := dag.AddValue[any](g, "done").ID()
			var opts []dag.KernelOption
			for i, w := range tt.writes {
				// Each writer is a kernel of its own, ordered one after
				// another through token buffers so no write conflicts.
				tok := dag.AddValue[any](g, name("tok", i)).ID()
				o := []dag.KernelOption{dag.WritesRange(x, w[0], w[1]), dag.Writes(tok)}
				o = append(o, opts...)
				g.AddKernel(name("w", i), nop, o...)
				opts = []dag.KernelOption{dag.Reads(tok)}
			}
			g.AddKernel("r", nop, append(opts, dag.ReadsRange(x, tt.read[0], tt.read[1]), dag.Writes(done))...)
			err := g.Validate()
			if tt.gap == [2]int64{} {
				require.NoError(t, err)
				return
			}
			errs := problems(t, err)
			require.Len(t, errs, 1)
			typed(&dag.NoWriterError{Kernel: "r", Buffer: "x", Offset: tt.gap[0], End: tt.gap[1]})(t, errs[0])
		})
	}
}

func TestValidateDuplicatesAmongManyNames(t *testing.T) {
	g := dag.New()
	for i := range 5000 {
		dag.AddValue[any](g, name("v", i), dag.Input()).ID()
	}
	g.AddKernel("v4321", nop)
	dag.AddValue[any](g, "v17", dag.Input()).ID()
	g.AddKernel("k", nop)
	g.AddKernel("k", nop)
	errs := problems(t, g.Validate())
	require.Len(t, errs, 3)
	typed(&dag.DuplicateError{Name: "v4321", Kinds: [2]string{"buffer", "kernel"}})(t, errs[0])
	typed(&dag.DuplicateError{Name: "v17", Kinds: [2]string{"buffer", "buffer"}})(t, errs[1])
	typed(&dag.DuplicateError{Name: "k", Kinds: [2]string{"kernel", "kernel"}})(t, errs[2])
}

func TestValidateOrderOfALargeGraphAddedBackwards(t *testing.T) {
	// A chain added sink first: every kernel reads a buffer written by a
	// later one, so Validate takes the general (heap) path.
	const n = 2000
	g := dag.New()
	bufs := make([]dag.BufferID, n)
	for i := range bufs {
		bufs[i] = dag.AddValue[any](g, name("b", i)).ID()
	}
	for i := n - 1; i >= 0; i-- {
		opts := []dag.KernelOption{dag.Writes(bufs[i])}
		if i > 0 {
			opts = append(opts, dag.Reads(bufs[i-1]))
		}
		g.AddKernel(name("k", i), nop, opts...)
	}
	require.NoError(t, g.Validate())
	order := g.Order()
	require.Len(t, order, n)
	for i, id := range order {
		assert.Equal(t, dag.KernelID(n-1-i), id)
	}
	preds := g.Predecessors()
	assert.Nil(t, preds[n-1])
	assert.Equal(t, []dag.KernelID{n - 1}, preds[n-2])
	assert.Equal(t, len(preds[0]), cap(preds[0]), "each list is a capped window")
}
