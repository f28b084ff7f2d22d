package exec

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/gpu/cpu"
)

// fanGraph returns n independent two-kernel chains joined by one sink:
// launches on every stream, and cross-stream waits at the sink.
func fanGraph(n int) *dag.Graph {
	nop := func(context.Context, dag.Launch) error { return nil }
	g := dag.New()
	var ends []dag.BufferID
	for i := range n {
		a, b := dag.AddValue[any](g, fmt.Sprint("a", i)).ID(), dag.AddValue[any](g, fmt.Sprint("b", i)).ID()
		g.AddKernel(fmt.Sprint("head", i), nop, dag.Writes(a))
		g.AddKernel(fmt.Sprint("tail", i), nop, dag.Reads(a), dag.Writes(b))
		ends = append(ends, b)
	}
	g.AddKernel("sink", nop, dag.Reads(ends...), dag.Writes(dag.AddValue[any](g, "out").ID()))
	return g
}

// TestCompiledAllocationsFixed checks that a plan's stream lists take a
// fixed number of allocations whatever the plan's size (one array for
// every stream's launches, one for their waits), and that they hold
// every launch once, in plan order per stream, at its slot.
func TestCompiledAllocationsFixed(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(3))
	require.NoError(t, err)
	defer dev.Close()
	e := MustNew(t, dev)
	allocs := map[int]float64{}
	for _, n := range []int{10, 1000} {
		p, err := e.Plan(fanGraph(n))
		require.NoError(t, err)
		require.Positive(t, p.Waits(), "n=%d: the plan needs cross-stream waits", n)
		allocs[n] = testing.AllocsPerRun(5, func() {
			p.compileOnce = sync.Once{}
			p.compiled()
		})
		c := p.compiled()
		seen := make([]bool, p.NumLaunches())
		for gs, list := range c.lists {
			prev, nwaits := -1, 0
			for j, h := range list {
				i := int(h.idx)
				assert.False(t, seen[i], "n=%d: launch %d listed twice", n, i)
				seen[i] = true
				assert.Equal(t, gs, p.GlobalStream(i), "n=%d: launch %d", n, i)
				assert.Greater(t, i, prev, "n=%d: stream %d out of plan order", n, gs)
				assert.Equal(t, int32(c.base[gs]+j), c.slot[i], "n=%d: launch %d's slot", n, i)
				l := p.launches[i]
				assert.True(t, slices.Equal(l.Waits, c.waits[gs][nwaits:h.waits]), "n=%d: launch %d's waits %v, listed %v", n, i, l.Waits, c.waits[gs][nwaits:h.waits])
				nwaits, prev = int(h.waits), i
			}
			assert.Len(t, c.waits[gs], nwaits, "n=%d: stream %d's waits", n, gs)
		}
		assert.NotContains(t, seen, false, "n=%d: a launch on no list", n)
	}
	assert.Equal(t, allocs[10], allocs[1000], "allocations of the stream lists grow with the plan: %v", allocs)
}

// TestPlanValidatedGraphConcurrently plans one validated graph from
// several goroutines at once (-race checks that planning it only reads
// it), and checks that a graph changed after its Validate is validated
// again.
func TestPlanValidatedGraphConcurrently(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	defer dev.Close()
	e := MustNew(t, dev)
	g := fanGraph(20)
	require.NoError(t, g.Validate())
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range errs {
		wg.Go(func() { _, errs[w] = e.Plan(g) })
	}
	wg.Wait()
	for w, err := range errs {
		assert.NoError(t, err, "planner %d", w)
	}
	// A second writer of "out" after validation: Plan must see it.
	g.AddKernel("again", func(context.Context, dag.Launch) error { return nil }, dag.Writes(0))
	_, err = e.Plan(g)
	assert.Error(t, err, "a graph changed since its Validate is validated again")
	p, err := e.Plan(fanGraph(3)) // never validated: Plan validates it
	require.NoError(t, err)
	assert.Equal(t, 7, p.NumLaunches())
}

// TestPlanRecordSizes keeps a plan's per-launch and per-buffer records
// small (planning writes one of each per kernel and buffer): the cold
// details live elsewhere (a launch's stream pin only while planning), and
// the fields pack without padding.
func TestPlanRecordSizes(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(PlannedLaunch{}), uintptr(192), "PlannedLaunch")
	assert.LessOrEqual(t, unsafe.Sizeof(PlannedBuffer{}), uintptr(48), "PlannedBuffer")
}

// TestLaunchOrderReusesScratch checks that ranking a graph again with the
// same hazard tracker allocates nothing: the ranks, the new order and the
// positions live in the tracker's scratch, which a pooled tracker carries
// from plan to plan.
func TestLaunchOrderReusesScratch(t *testing.T) {
	g := fanGraph(200)
	require.NoError(t, g.Validate())
	haz := newHazards(0)
	out, from, found := launchOrder(g, g.Order(), haz, false)
	require.True(t, found)
	require.NotNil(t, from, "the fan's kernel order is not by rank: launchOrder reorders it")
	want := slices.Clone(out)
	allocs := testing.AllocsPerRun(10, func() { out, _, _ = launchOrder(g, g.Order(), haz, false) })
	assert.Zero(t, allocs, "allocations per launchOrder with a used tracker")
	assert.Equal(t, want, out, "the order ranked again")
}
