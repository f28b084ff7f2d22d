package arrow_test

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/kvio"
)

// The Example's pipeline runs its two partitions' kernels on the two
// streams of the device, holds no Arrow memory after its result is
// closed, and finds what a plain loop over the file's rows finds.
func TestPipeline(t *testing.T) {
	ctx := t.Context()
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	f, err := kvio.Open(sampleFile)
	require.NoError(t, err)
	defer f.Close()
	src, err := kvio.OpenParquet(ctx, f, kvio.WithColumns("delay"))
	require.NoError(t, err)
	defer src.Close()

	var want int64
	batches, err := kvio.ReadAll(ctx, src, mem)
	require.NoError(t, err)
	for _, b := range batches {
		delay, err := kvio.Column[*array.Int16](b, "delay")
		require.NoError(t, err)
		for i := range delay.Len() {
			if d := delay.Value(i); delay.IsValid(i) && d > 15 {
				want++
			}
		}
		b.Release()
	}
	require.Positive(t, want)

	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	g, total := pipeline(src)
	e, err := exec.New(dev, exec.WithAllocator(mem))
	require.NoError(t, err)
	res, err := e.Run(ctx, g)
	require.NoError(t, err)
	got, err := exec.Get(res, total)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	streams := map[string]int{}
	for _, l := range res.Report.Launches() {
		assert.Equal(t, exec.StatusOK, l.Status, l.Kernel)
		streams[l.Kernel] = l.Stream
	}
	assert.NotEqual(t, streams["filter 0"], streams["filter 1"], "the partitions' kernels share a stream: %v", streams)
	require.NoError(t, res.Close())
}
