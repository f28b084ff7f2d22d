package bench_test

import (
	"bytes"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/bench"
)

// formatSink keeps formatted numbers alive so formatting is not dropped.
var formatSink int

// formatLoop returns work that formats units numbers per call and does
// nothing else.
func formatLoop(units int) func() error {
	return func() error {
		n := 0 // summed locally: a global's every write is instrumented under -race
		for i := range units {
			n += len(strconv.FormatFloat(float64(i)*1.25, 'g', -1, 64))
		}
		formatSink += n
		return nil
	}
}

// TestProfileCPUSplitsByCategory profiles a loop that does nothing but
// format numbers: most samples of its goroutine must land in the
// formatting category (about 2/3 under -race, whose instrumentation takes
// the rest; over 9/10 without), and the per-unit figures must add up.
func TestProfileCPUSplitsByCategory(t *testing.T) {
	const units = 10_000
	fn := formatLoop(units)
	cats := []bench.Category{
		{Name: "never", Funcs: []string{"no/such.Function"}},
		{Name: "format", Funcs: []string{"strconv."}},
	}
	b, err := bench.ProfileCPU(fn, units, time.Second, true, cats)
	require.NoError(t, err)
	require.Greater(t, b.Runs, 0)
	assert.Equal(t, b.Runs*units, b.Units)
	assert.GreaterOrEqual(t, b.Wall, time.Second)
	require.Greater(t, b.Total, int64(0), "no samples in 1 s of work")
	require.GreaterOrEqual(t, len(b.Shares), 2)
	assert.Equal(t, "never", b.Shares[0].Category)
	assert.Zero(t, b.Shares[0].Ns)
	assert.Equal(t, "format", b.Shares[1].Category)
	assert.Greater(t, b.Shares[1].Fraction, 0.5, "formatting share of a formatting loop: %+v", b.Shares)
	var sum int64
	var frac float64
	for _, s := range b.Shares {
		sum += s.Ns
		frac += s.Fraction
		assert.InDelta(t, float64(s.Ns)/float64(b.Units), s.PerUnit, 1e-9)
	}
	assert.Equal(t, b.Total, sum)
	assert.InDelta(t, 1, frac, 1e-9)
}

// TestProfileCPUWhileProfiling: a CPU profile already running is an
// error, not a silent empty breakdown.
func TestProfileCPUWhileProfiling(t *testing.T) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Skipf("the test binary is already profiling: %v", err)
	}
	defer pprof.StopCPUProfile()
	_, err := bench.ProfileCPU(func() error { return nil }, 1, time.Millisecond, false, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "CPU profile")
}

// TestProfileCPUReturnsWorkError: fn's error comes back.
func TestProfileCPUReturnsWorkError(t *testing.T) {
	boom := assert.AnError
	_, err := bench.ProfileCPU(func() error { return boom }, 1, time.Millisecond, false, nil)
	require.ErrorIs(t, err, boom)
}

// TestProfileCPULeafCategory: a Leaf category takes only samples whose
// innermost frame it names, so work a function calls and no category
// takes counts as "other", not as the caller's.
func TestProfileCPULeafCategory(t *testing.T) {
	const units = 10_000
	fn := formatLoop(units)
	cats := []bench.Category{{Name: "the test's own frames", Funcs: []string{"github.com/streamdag/streamdag/bench_test."}, Leaf: true}}
	b, err := bench.ProfileCPU(fn, units, time.Second, true, cats)
	require.NoError(t, err)
	require.Len(t, b.Shares, 2, "%+v", b.Shares)
	assert.Equal(t, "other", b.Shares[1].Category)
	assert.Greater(t, b.Shares[1].Fraction, 0.5, "strconv's samples are not the test's own: %+v", b.Shares)
}

// TestProfileCPUBadInput: no work, or no unit of work per call, is an
// error naming the problem, before any profiling starts.
func TestProfileCPUBadInput(t *testing.T) {
	_, err := bench.ProfileCPU(nil, 1, time.Millisecond, false, nil)
	require.ErrorContains(t, err, "needs work to profile")
	_, err = bench.ProfileCPU(func() error { return nil }, 0, time.Millisecond, false, nil)
	require.ErrorContains(t, err, "units 0")
}
