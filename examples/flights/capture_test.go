package flights_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/leaktest"
)

// capturePipeline builds the flights pipeline over the embedded sample
// in three partitions, with the faults given, and plans it on e.
func capturePipeline(t *testing.T, e *exec.Executor, fail ...string) (*flights.Pipeline, *exec.Plan) {
	t.Helper()
	p, err := flights.Build(openSample(t), flights.WithPartitions(3))
	require.NoError(t, err)
	for _, k := range fail {
		require.NoError(t, p.Graph.InjectFailure(k, false))
	}
	plan, err := e.Plan(p.Graph)
	require.NoError(t, err)
	return p, plan
}

// resultCSV is the result CSV of res, a run of p (csvOf).
func resultCSV(t *testing.T, p *flights.Pipeline, res *exec.Result) string {
	t.Helper()
	table, err := p.Result(res)
	require.NoError(t, err)
	return csvOf(t, &flights.Output{Report: res.Report, Table: table})
}

// A captured flights run on the embedded sample replays with the same
// CSV, byte for byte, each replay reported as one; a capture during
// which a filter kernel fails is refused for replay with that failure.
func TestFlightsCaptureReplaysSameCSV(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(3))
	require.NoError(t, err)
	defer dev.Close()
	e, err := exec.New(dev, exec.WithAllocator(leaktest.Allocator(t)))
	require.NoError(t, err)

	p, plan := capturePipeline(t, e)
	c, res, err := e.Capture(t.Context(), plan)
	require.NoError(t, err)
	require.NoError(t, res.Err())
	require.NoError(t, c.Err())
	want := resultCSV(t, p, res)
	require.NoError(t, res.Close())
	require.Greater(t, strings.Count(want, "\n"), 2, "a header and rows:\n%s", want)
	assert.NotEmpty(t, c.Writes())
	for range 2 {
		again, err := c.Replay(t.Context())
		require.NoError(t, err)
		require.NoError(t, again.Err())
		assert.Equal(t, exec.ReplayedCapture, again.Report.Ran)
		assert.Equal(t, want, resultCSV(t, p, again))
		require.NoError(t, again.Close())
	}

	_, bad := capturePipeline(t, e, "filter[1]")
	cb, resb, err := e.Capture(t.Context(), bad)
	require.NoError(t, err)
	defer resb.Close()
	require.ErrorIs(t, cb.Err(), dag.ErrInjected)
	refused, err := cb.Replay(t.Context())
	assert.Nil(t, refused)
	require.ErrorIs(t, err, dag.ErrInjected)
	var d *failgraph.DoomError
	require.ErrorAs(t, err, &d)
	assert.Equal(t, "filter[1]", d.Kernel)
	assert.True(t, strings.HasPrefix(err.Error(), `exec: capture doomed: kernel "filter[1]" failed: `), err.Error())
}
