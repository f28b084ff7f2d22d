package exec_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/topology"
)

// keptGraph builds: a host source writing base+j into ulong j of "a" (w
// ulongs; base is the input value buffer), then two OpenCL-only scale
// kernels, a→mid (×3+1) and mid→out (×2+5). out ends on the code device
// alone: a Result fetches it on its first read, and holds the run's
// device memory until Close.
func keptGraph(w int) (g *dag.Graph, in, out dag.BufferID) {
	g = dag.New()
	base := dag.AddValue[uint64](g, "base", dag.Input())
	in = base.ID()
	a, mid := g.AddBuffer("a", int64(8*w)), g.AddBuffer("mid", int64(8*w))
	out = g.AddBuffer("out", int64(8*w))
	g.AddKernel("src", func(_ context.Context, l dag.Launch) error {
		base := valueOf(l, base)
		for j := range w {
			binary.LittleEndian.PutUint64(bytesOf(l, a)[8*j:], base+uint64(j))
		}
		return nil
	}, dag.Reads(in), dag.Writes(a))
	g.AddKernel("first", nil, dag.Reads(a), dag.Writes(mid),
		dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(a), dag.BufferArg(mid), dag.ScalarArg(uint64(3)), dag.ScalarArg(uint64(1))))
	g.AddKernel("second", nil, dag.Reads(mid), dag.Writes(out),
		dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(mid), dag.BufferArg(out), dag.ScalarArg(uint64(2)), dag.ScalarArg(uint64(5))))
	return g, in, out
}

// keptWant is keptGraph's out for base.
func keptWant(base uint64, w int) []uint64 {
	want := make([]uint64, w)
	for j := range want {
		want[j] = ((base+uint64(j))*3+1)*2 + 5
	}
	return want
}

// keptOut reads res's out as ulongs.
func keptOut(t *testing.T, res *exec.Result, out dag.BufferID, w int) []uint64 {
	t.Helper()
	require.NoError(t, res.Err())
	b, err := res.Buffer(out)
	require.NoError(t, err)
	got := make([]uint64, w)
	for j := range got {
		got[j] = u64(b.Bytes(), 8*j)
	}
	return got
}

// TestPlanKeepsDeviceMemory: a plan keeps its runs' device memory for its
// next run (which allocates nothing), never while a Result may still
// fetch from it, gives it to one of several concurrent runs, and releases
// it on ReleaseDeviceMemory.
func TestPlanKeepsDeviceMemory(t *testing.T) {
	const w = 16
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, d *fakeCode, e *exec.Executor, p *exec.Plan, in, out dag.BufferID, rng *rand.Rand)
	}{
		{"reuse", func(t *testing.T, d *fakeCode, e *exec.Executor, p *exec.Plan, in, out dag.BufferID, rng *rand.Rand) {
			base := rng.Uint64N(1 << 20)
			res, err := e.Execute(t.Context(), p, exec.WithInput(in, base), exec.WithKeepDeviceMemory())
			require.NoError(t, err)
			assert.Equal(t, keptWant(base, w), keptOut(t, res, out, w))
			res.Close()
			first := d.allocCount()
			require.Positive(t, first)
			kept := d.live()
			require.Positive(t, kept, "the plan keeps the run's device memory")
			for range 3 {
				base = rng.Uint64N(1 << 20)
				res, err = e.Execute(t.Context(), p, exec.WithInput(in, base), exec.WithKeepDeviceMemory())
				require.NoError(t, err)
				assert.Equal(t, keptWant(base, w), keptOut(t, res, out, w))
				res.Close()
				assert.Equal(t, first, d.allocCount(), "a later run of the plan allocates nothing")
				assert.Equal(t, kept, d.live())
			}
			p.ReleaseDeviceMemory()
			assert.Zero(t, d.live(), "ReleaseDeviceMemory releases what the plan kept")
			p.ReleaseDeviceMemory() // idempotent
			res, err = e.Execute(t.Context(), p, exec.WithInput(in, base), exec.WithKeepDeviceMemory())
			require.NoError(t, err)
			assert.Equal(t, keptWant(base, w), keptOut(t, res, out, w))
			res.Close()
			assert.Equal(t, 2*first, d.allocCount(), "after ReleaseDeviceMemory a run allocates again")
		}},
		{"result-holds", func(t *testing.T, d *fakeCode, e *exec.Executor, p *exec.Plan, in, out dag.BufferID, rng *rand.Rand) {
			warm, err := e.Execute(t.Context(), p, exec.WithInput(in, uint64(0)), exec.WithKeepDeviceMemory())
			require.NoError(t, err)
			warm.Close()
			first := d.allocCount()
			b1, b2 := rng.Uint64N(1<<20), rng.Uint64N(1<<20)+1<<20
			// res1 is not read: its out is still on the device, in the
			// memory it took from the plan.
			res1, err := e.Execute(t.Context(), p, exec.WithInput(in, b1), exec.WithKeepDeviceMemory())
			require.NoError(t, err)
			assert.Equal(t, first, d.allocCount(), "the second run takes the first one's memory")
			res2, err := e.Execute(t.Context(), p, exec.WithInput(in, b2), exec.WithKeepDeviceMemory())
			require.NoError(t, err)
			assert.Equal(t, 2*first, d.allocCount(), "memory a live Result holds is not reused")
			assert.Equal(t, keptWant(b2, w), keptOut(t, res2, out, w))
			res2.Close()
			assert.Equal(t, keptWant(b1, w), keptOut(t, res1, out, w), "a later run did not write over an open Result's device memory")
			res1.Close() // the plan keeps res2's memory: res1's is released
			res3, err := e.Execute(t.Context(), p, exec.WithInput(in, b1+7), exec.WithKeepDeviceMemory())
			require.NoError(t, err)
			assert.Equal(t, keptWant(b1+7, w), keptOut(t, res3, out, w))
			res3.Close()
			assert.Equal(t, 2*first, d.allocCount())
		}},
		{"concurrent", func(t *testing.T, d *fakeCode, e *exec.Executor, p *exec.Plan, in, out dag.BufferID, rng *rand.Rand) {
			const runs = 8
			bases := make([]uint64, runs)
			for i := range bases {
				bases[i] = rng.Uint64N(1 << 20)
			}
			got := make([][]uint64, runs)
			errs := make([]error, runs)
			var wg sync.WaitGroup
			for i := range runs {
				wg.Go(func() {
					res, err := e.Execute(t.Context(), p, exec.WithInput(in, bases[i]), exec.WithKeepDeviceMemory())
					if err != nil {
						errs[i] = err
						return
					}
					defer res.Close()
					if errs[i] = res.Err(); errs[i] != nil {
						return
					}
					b, err := res.Buffer(out)
					if err != nil {
						errs[i] = err
						return
					}
					got[i] = make([]uint64, w)
					for j := range got[i] {
						got[i][j] = u64(b.Bytes(), 8*j)
					}
				})
			}
			wg.Wait()
			for i := range runs {
				require.NoError(t, errs[i], "run %d", i)
				assert.Equal(t, keptWant(bases[i], w), got[i], "run %d", i)
			}
			assert.LessOrEqual(t, d.live(), int64(3*8*w), "the plan keeps one run's memory")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := uint64(len(tc.name))
			rng := rand.New(rand.NewPCG(seed, seed))
			d := newFakeCode(topology.OpenCL(7), 2, fakeKernels)
			e := cpuAnd(t, 1, d)
			g, in, out := keptGraph(w)
			p, err := e.Plan(g)
			require.NoError(t, err)
			tc.run(t, d, e, p, in, out, rng)
			p.ReleaseDeviceMemory()
			require.NoError(t, d.Close())
			assert.Zero(t, d.live(), "seed %d: device memory left allocated", seed)
		})
	}
}

// TestRunKeepsNoDeviceMemory: Executor.Run, whose plan runs once, keeps
// no device memory once its Result is closed.
func TestRunKeepsNoDeviceMemory(t *testing.T) {
	const w = 8
	d := newFakeCode(topology.OpenCL(7), 1, fakeKernels)
	e := cpuAnd(t, 1, d)
	g, in, out := keptGraph(w)
	res, err := e.Run(t.Context(), g, exec.WithInput(in, uint64(3)))
	require.NoError(t, err)
	assert.Equal(t, keptWant(3, w), keptOut(t, res, out, w))
	assert.Positive(t, d.live(), "an open Result holds its device memory")
	res.Close()
	assert.Zero(t, d.live(), fmt.Sprintf("%d bytes kept", d.live()))
	require.NoError(t, d.Close())
}

// TestPlanKeepsStatusWords: the memory of a code stream's status words
// (dag.StatusArg) is kept with the plan too, and zeroed for each run: a
// soft failure of one run does not carry over to the next.
func TestPlanKeepsStatusWords(t *testing.T) {
	d := newFakeCode(topology.OpenCL(7), 1, fakeKernels)
	e := cpuAnd(t, 1, d)
	g := dag.New()
	in := dag.AddValue[uint64](g, "v", dag.Input())
	a, mid := g.AddBuffer("a", 8), g.AddBuffer("mid", 8)
	g.AddKernel("src", func(_ context.Context, l dag.Launch) error {
		binary.LittleEndian.PutUint64(bytesOf(l, a), valueOf(l, in))
		return nil
	}, dag.Reads(in.ID()), dag.Writes(a))
	g.AddKernel("check", nil, dag.Reads(a), dag.Writes(mid),
		dag.OpenCL(checkCL, "check", func([]int64) dag.Shape { return dag.Shape{Global: []int{1}} },
			dag.BufferArg(a), dag.BufferArg(mid), dag.StatusArg()))
	p, err := e.Plan(g)
	require.NoError(t, err)
	first := 0
	for i, tc := range []struct {
		v    uint64
		fail bool
	}{{2, false}, {3, true}, {4, false}, {5, true}, {6, false}} {
		res, err := e.Execute(t.Context(), p, exec.WithInput(in.ID(), tc.v), exec.WithKeepDeviceMemory())
		require.NoError(t, err)
		if tc.fail {
			var se *exec.StatusError
			require.ErrorAs(t, res.Err(), &se, "run %d", i)
			assert.Equal(t, int32(7), se.Value)
		} else {
			require.NoError(t, res.Err(), "run %d", i)
			b, err := res.Buffer(mid)
			require.NoError(t, err)
			assert.Equal(t, tc.v, u64(b.Bytes(), 0), "run %d", i)
		}
		res.Close()
		if i == 0 {
			first = d.allocCount()
		}
		assert.Equal(t, first, d.allocCount(), "run %d allocates nothing", i)
	}
	p.ReleaseDeviceMemory()
	assert.Zero(t, d.live())
	require.NoError(t, d.Close())
}

// TestDroppedPlanReleasesDeviceMemory: the memory a plan keeps is released
// once the plan is unreachable (its cleanup holds no reference to it).
func TestDroppedPlanReleasesDeviceMemory(t *testing.T) {
	const w = 8
	d := newFakeCode(topology.OpenCL(7), 1, fakeKernels)
	e := cpuAnd(t, 1, d)
	func() {
		g, in, out := keptGraph(w)
		p, err := e.Plan(g)
		require.NoError(t, err)
		res, err := e.Execute(t.Context(), p, exec.WithInput(in, uint64(9)), exec.WithKeepDeviceMemory())
		require.NoError(t, err)
		assert.Equal(t, keptWant(9, w), keptOut(t, res, out, w))
		res.Close()
		require.Positive(t, d.live(), "the plan keeps the run's device memory")
	}()
	// Cleanups run on their own goroutine after a collection finds the
	// plan unreachable: collect until it has run.
	for i := 0; i < 1000 && d.live() != 0; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	assert.Zero(t, d.live(), "a dropped plan's device memory is released")
	require.NoError(t, d.Close())
}

// TestKeptDeviceMemoryCountsInBudget: the device memory a plan keeps
// (WithKeepDeviceMemory) holds its bytes of the budget: a run of another
// plan that needs them waits for them until ReleaseDeviceMemory gives
// them back, and after that nothing is left allocated or taken.
func TestKeptDeviceMemoryCountsInBudget(t *testing.T) {
	const w = 16
	// A run of keptGraph takes 6×8w bytes (a, mid and out on the host
	// and on the device); the plan keeps the device's 3×8w. The budget
	// fits one run, but not a run beside kept memory.
	const kept, total = 3 * 8 * w, 8 * 8 * w
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			dev := cd.make(t, 1)
			budget := buffers.NewBudget(total)
			e := cpuAnd(t, 1, dev, exec.WithBudget(budget))
			g, in, out := keptGraph(w)
			pa, err := e.Plan(g)
			require.NoError(t, err)
			pb, err := e.Plan(g)
			require.NoError(t, err)
			t.Cleanup(pa.ReleaseDeviceMemory) // before the device's leak check
			res, err := e.Execute(t.Context(), pa, exec.WithInput(in, uint64(1)), exec.WithKeepDeviceMemory())
			require.NoError(t, err)
			assert.Equal(t, keptWant(1, w), keptOut(t, res, out, w))
			res.Close()
			if fd, ok := dev.(*fakeCode); ok {
				assert.Equal(t, int64(kept), fd.live(), "the plan keeps its device memory")
			}
			assert.True(t, free(budget, total-kept), "the rest of the budget is free")
			assert.False(t, free(budget, total-kept+1), "the kept memory holds its bytes")

			type outcome struct {
				res *exec.Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := e.Execute(t.Context(), pb, exec.WithInput(in, uint64(2)))
				done <- outcome{res, err}
			}()
			// The other plan's run needs more than the kept memory leaves:
			// it queues for the budget (then TryAcquire refuses even one
			// free byte) rather than run beside it.
			for budget.TryAcquire(1) {
				budget.Release(1)
				select {
				case o := <-done:
					if o.res != nil {
						o.res.Close()
					}
					t.Fatalf("the second plan's run did not wait for the kept bytes (err %v)", o.err)
				default:
				}
				runtime.Gosched()
			}
			pa.ReleaseDeviceMemory()
			o := <-done
			require.NoError(t, o.err)
			assert.Equal(t, keptWant(2, w), keptOut(t, o.res, out, w))
			o.res.Close()
			assert.True(t, free(budget, total), "nothing holds budget bytes")
			if fd, ok := dev.(*fakeCode); ok {
				assert.Zero(t, fd.live(), "nothing stays allocated")
			}
		})
	}
}

// TestDeviceMemoryReleasedAtClose: without WithKeepDeviceMemory a run
// of a plan leaves nothing allocated on the code device, nor taken of
// the budget, after its Result.Close; a run that does not keep releases
// what an earlier one kept, after using it.
func TestDeviceMemoryReleasedAtClose(t *testing.T) {
	const w = 8
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			dev := cd.make(t, 1)
			budget := buffers.NewBudget(1 << 20)
			e := cpuAnd(t, 1, dev, exec.WithBudget(budget))
			g, in, out := keptGraph(w)
			p, err := e.Plan(g)
			require.NoError(t, err)
			fd, fake := dev.(*fakeCode)
			check := func(what string, kept int64) {
				t.Helper()
				assert.True(t, free(budget, 1<<20-kept), "%s: the budget is free but for %d bytes", what, kept)
				if kept > 0 {
					assert.False(t, free(budget, 1<<20-kept+1), "%s: %d bytes held", what, kept)
				}
				if fake {
					assert.Equal(t, kept, fd.live(), "%s: bytes allocated on the device", what)
				}
			}
			for i, keep := range []bool{false, false, true, false} {
				opts := []exec.RunOption{exec.WithInput(in, uint64(i))}
				if keep {
					opts = append(opts, exec.WithKeepDeviceMemory())
				}
				allocs := 0
				if fake {
					allocs = fd.allocCount()
				}
				res, err := e.Execute(t.Context(), p, opts...)
				require.NoError(t, err)
				assert.Equal(t, keptWant(uint64(i), w), keptOut(t, res, out, w))
				res.Close()
				var kept int64
				if keep {
					kept = 3 * 8 * w
				}
				check(fmt.Sprintf("run %d (keep %v)", i, keep), kept)
				if fake && i == 3 {
					assert.Equal(t, allocs, fd.allocCount(), "the run after a keeping one uses its memory")
				}
			}
		})
	}
}

// free reports whether n bytes of b are free now (and no run waits for
// any), leaving b as it was.
func free(b *buffers.Budget, n int64) bool {
	if !b.TryAcquire(n) {
		return false
	}
	b.Release(n)
	return true
}
