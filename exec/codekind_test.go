package exec_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/topology"
)

// fakeCL is the driver kind, and the code kind, of fakeclDriver: a kind
// no package of the module knows.
const fakeCL = "fakecl"

func init() { gpu.Register(fakeCL, fakeclDriver{}) }

// fakeclKernels are the entry points of fakecl code: iota writes
// out[i] = i×k + add over ulongs; scale is fakeKernels' (out[i] =
// in[i]×k + add).
var fakeclKernels = map[string]fakeKernel{
	"iota": func(global []int, args []any) error {
		out, k, add := args[0].([]byte), args[1].(uint64), args[2].(uint64)
		for i := range global[0] {
			binary.LittleEndian.PutUint64(out[8*i:], uint64(i)*k+add)
		}
		return nil
	},
	"scale": fakeKernels["scale"],
}

// fakeclDriver opens one fake code device, gpu0, of driver kind and
// code kind "fakecl", with cfg.Streams streams (0: 2).
type fakeclDriver struct{}

func (fakeclDriver) Open(_ context.Context, cfg gpu.Config) (gpu.Set, error) {
	n := cfg.Streams
	if n == 0 {
		n = 2
	}
	if n < 0 {
		return nil, fmt.Errorf("fakecl: %d streams", n)
	}
	d := newFakeCode(topology.GPU(0), n, fakeclKernels)
	d.kind, d.code = fakeCL, fakeCL
	return fakeclSet{d}, nil
}

type fakeclSet struct{ d *fakeCode }

func (s fakeclSet) Devices() []gpu.Device { return []gpu.Device{s.d} }
func (s fakeclSet) Close() error          { return s.d.Close() }

// fakeclGraph builds a graph of fakecl code only: "seed" writes w ulongs
// i×5 + 2 into a, "scale" writes a×3 + 1 into s. It returns the graph, s
// and s's expected bytes.
func fakeclGraph(w int) (*dag.Graph, dag.BufferID, []byte) {
	g := dag.New()
	a, s := g.AddBuffer("a", int64(8*w)), g.AddBuffer("s", int64(8*w))
	g.AddKernel("seed", nil, dag.Writes(a),
		dag.DeviceCode(fakeCL, "fakecl iota", "iota", ulongs, dag.BufferArg(a), dag.ScalarArg(uint64(5)), dag.ScalarArg(uint64(2))))
	g.AddKernel("scale", nil, dag.Reads(a), dag.Writes(s),
		dag.DeviceCode(fakeCL, "fakecl scale", "scale", ulongs, dag.BufferArg(a), dag.BufferArg(s), dag.ScalarArg(uint64(3)), dag.ScalarArg(uint64(1))))
	want := make([]byte, 8*w)
	for i := range w {
		binary.LittleEndian.PutUint64(want[8*i:], (uint64(i)*5+2)*3+1)
	}
	return g, s, want
}

// A driver registered by a test, under a kind of its own whose devices
// declare a code kind of their own, is driven by exec unchanged: a graph
// whose kernels have only that kind's variants runs on its device, with
// the right bytes; and the same graph has no device with code for it on
// an executor whose code device runs OpenCL C.
func TestRegisteredCodeKindRuns(t *testing.T) {
	const w = 16
	require.Contains(t, gpu.Drivers(), fakeCL)
	set, err := gpu.Open(t.Context(), fakeCL, gpu.WithStreams(2))
	require.NoError(t, err)
	fake := set.Devices()[0].(*fakeCode)
	t.Cleanup(func() {
		require.NoError(t, set.Close())
		assert.Zero(t, fake.live(), "device memory left allocated")
	})
	require.Equal(t, fakeCL, fake.Kind())

	g, s, want := fakeclGraph(w)
	e := cpuAnd(t, 1, fake)
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, res.Err())
	b, err := res.Buffer(s)
	require.NoError(t, err)
	assert.Equal(t, want, b.Bytes())
	for _, l := range res.Report.Launches() {
		if l.Kernel == "seed" || l.Kernel == "scale" {
			assert.Equal(t, topology.GPU(0), l.Device, l.Kernel)
			assert.Equal(t, exec.StatusOK, l.Status, l.Kernel)
		}
	}
	assert.Equal(t, 1, fake.runs("seed"))
	assert.Equal(t, 1, fake.runs("scale"))

	t.Run("no device of its kind", func(t *testing.T) {
		cl := newFakeCode(topology.OpenCL(7), 1, fakeclKernels) // declares "opencl"
		t.Cleanup(func() { require.NoError(t, cl.Close()) })
		g, _, _ := fakeclGraph(w)
		_, err := cpuAnd(t, 1, cl).Plan(g)
		assert.EqualError(t, err, `exec: kernel "seed": no device of the plan has code for it (the kernel has fakecl code; cpu runs go code, opencl7 runs opencl code)`)
	})
}

// A device of a driver exec has never heard of runs kernels' Go functions
// when it is no gpu.CodeDevice (its memory is host-addressable), and a
// code device must name a kind of device code.
func TestDeviceCodeIsACapability(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, dev.Close()) })
	g, total, want := mixedGraph(3, 4)
	res, err := exec.MustNew(t, otherKind{dev}, exec.WithAllocator(leaktest.Allocator(t))).Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	assert.Equal(t, want, uint64Of(t, res, total), "a host device of kind %q", otherKind{}.Kind())

	for _, code := range []string{"", string(dag.HostCode)} {
		fake := newFakeCode(topology.OpenCL(3), 1, nil)
		fake.code = code
		t.Cleanup(func() { require.NoError(t, fake.Close()) })
		_, err := exec.NewMulti([]gpu.Device{dev, fake}, nil)
		assert.EqualError(t, err, fmt.Sprintf(`exec: device opencl3 is a code device declaring code %q: a code device names a kind of device code, not empty and not "go" (host code)`, code))
	}
}

// driverNameUses returns, as "file:line: what", each place in f that
// chooses by a driver's name: a call of a method Kind with no arguments
// (gpu.Device's driver kind), or a string literal in a comparison or a
// switch case that names a driver kind of kinds.
func driverNameUses(fset *token.FileSet, f *ast.File, kinds []string) []string {
	var uses []string
	report := func(n ast.Node, what string) {
		uses = append(uses, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), what))
	}
	driverLit := func(e ast.Expr) bool {
		lit, ok := ast.Unparen(e).(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return false
		}
		v, err := strconv.Unquote(lit.Value)
		return err == nil && slices.Contains(kinds, v)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Kind" && len(n.Args) == 0 {
				report(n, "a call of Kind()")
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (driverLit(n.X) || driverLit(n.Y)) {
				report(n, "a comparison with a driver kind")
			}
		case *ast.CaseClause:
			if slices.ContainsFunc(n.List, driverLit) {
				report(n, "a switch case on a driver kind")
			}
		}
		return true
	})
	return uses
}

// exec chooses code by capabilities only: none of its non-test files
// calls Kind() or compares with, or switches on, a driver kind's name.
func TestExecComparesNoDriverName(t *testing.T) {
	kinds := append(gpu.Drivers(), "cpu", "sim", "opencl", "cuda")
	require.Subset(t, kinds, []string{"cpu", "sim", "opencl", fakeCL})

	// The check finds what it looks for.
	const bad = `package p
func f(d, cd interface{ Kind() string; Code() string }) int {
	if d.Kind() == "cpu" { return 1 }
	switch cd.Code() {
	case "opencl": return 2
	}
	if "sim" != cd.Code() { return 3 }
	return 0
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "bad.go", bad, 0)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"bad.go:3:5: a comparison with a driver kind",
		"bad.go:3:5: a call of Kind()",
		"bad.go:5:2: a switch case on a driver kind",
		"bad.go:7:5: a comparison with a driver kind",
	}, driverNameUses(fset, f, kinds))

	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	files := 0
	for _, ent := range entries {
		name := ent.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		files++
		assert.Empty(t, driverNameUses(fset, f, kinds), "exec chooses a device's code by a driver's name")
	}
	assert.Greater(t, files, 10, "exec's non-test files read")
}
