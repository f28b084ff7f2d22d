package exec_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/internal/leaktest"
)

// A buffer larger than the whole device budget can never be reserved: it
// reads as that failure, the launch that would write it is skipped with
// it, and unrelated branches run on.
func TestOverBudgetBufferIsAnUnallocatedFailure(t *testing.T) {
	dev, err := gpu.NewCPU(gpu.WithStreams(1))
	require.NoError(t, err)
	defer dev.Close()
	e := exec.New(dev, exec.WithAllocator(leaktest.Allocator(t)), exec.WithBudget(buffers.NewBudget(1024)))
	g := dag.New()
	small := g.AddBuffer("small", 512)
	big := g.AddBuffer("big", 4096)
	other := g.AddBuffer("other", 8)
	ran, otherRan := false, false
	g.AddKernel("k", func(_ context.Context, _ dag.Launch) error { ran = true; return nil }, dag.Writes(small, big))
	g.AddKernel("unrelated", func(_ context.Context, _ dag.Launch) error { otherRan = true; return nil }, dag.Writes(other))
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	assert.False(t, ran)
	assert.True(t, otherRan)
	k := res.Report.Launches()[0]
	assert.Equal(t, exec.StatusSkipped, k.Status)
	assert.ErrorIs(t, k.Err, buffers.ErrOverBudget)
	assert.Equal(t, []string{"allocate big"}, k.Chain)
	for _, id := range []dag.BufferID{small, big} {
		_, err = res.Buffer(id)
		var ue *failgraph.UnwrittenError
		require.ErrorAs(t, err, &ue)
		assert.Equal(t, k.Failure, ue.Failure)
		assert.ErrorIs(t, err, buffers.ErrOverBudget)
		assert.ErrorContains(t, err, `"big"`)
	}
	_, err = res.Buffer(other)
	assert.NoError(t, err)
}
