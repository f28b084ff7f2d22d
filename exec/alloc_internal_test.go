package exec

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/leaktest"
)

// releaseCount is an input value that counts its releases.
type releaseCount struct{ n int }

func (c *releaseCount) Release() { c.n++ }

// A run whose input cannot be stored (its buffer was released) does not
// start: it gives back every reserved byte and releases each input value
// exactly once, the one Store refused included.
func TestStoreInputErrorReleasesTheRun(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	defer dev.Close()
	mem := leaktest.Allocator(t)
	budget := buffers.NewBudget(1024)
	e := MustNew(t, dev, WithAllocator(mem), WithBudget(budget))
	g := dag.New()
	raw := g.AddBuffer("raw", 512)
	var ins []dag.BufferID
	for i := range 4 {
		ins = append(ins, dag.AddValue[any](g, fmt.Sprint("in", i), dag.Input()).ID())
	}
	nop := func(context.Context, dag.Launch) error { return nil }
	g.AddKernel("k", nop, dag.Reads(ins...), dag.Writes(raw))
	p, err := e.Plan(g)
	require.NoError(t, err)
	// The run's slots come from the plan's kept ones: one holds a
	// released buffer where input in2 goes, so storing it fails.
	dead := e.pools[0].AllocateValues([]buffers.ValueSpec{{ID: buffers.ID(ins[2]), Name: "in2"}})[0]
	dead.Release()
	slots := p.bufSlots()
	slots[ins[2]].Store(dead)
	p.putSlots(slots)
	vals := make([]*releaseCount, len(ins))
	var opts []RunOption
	for i, id := range ins {
		vals[i] = &releaseCount{}
		opts = append(opts, WithInput(id, vals[i]))
	}
	res, err := e.Execute(t.Context(), p, opts...)
	assert.Nil(t, res)
	require.ErrorIs(t, err, buffers.ErrReleased)
	assert.ErrorContains(t, err, `exec: input for buffer "in2"`)
	for i, v := range vals {
		assert.Equal(t, 1, v.n, "releases of input %d", i)
	}
	require.True(t, budget.TryAcquire(1024), "the run gave every byte back")
	budget.Release(1024)
	mem.AssertSize(t, 0)
}
