package exec_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/internal/leaktest"
)

func TestOverBudgetBufferFailsBeforeAnyLaunch(t *testing.T) {
	dev, err := gpu.NewCPU(gpu.WithStreams(1))
	require.NoError(t, err)
	defer dev.Close()
	e := exec.New(dev, exec.WithAllocator(leaktest.Allocator(t)), exec.WithBudget(buffers.NewBudget(1024)))
	g := dag.New()
	small := g.AddBuffer("small", 512)
	big := g.AddBuffer("big", 4096)
	ran := false
	g.AddKernel("k", func(_ context.Context, _ dag.Launch) error { ran = true; return nil }, dag.Writes(small, big))
	_, err = e.Run(t.Context(), g)
	require.ErrorIs(t, err, buffers.ErrOverBudget)
	assert.ErrorContains(t, err, `"big"`)
	assert.False(t, ran)
}
