package exec_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
)

// A kernel that writes rows [0, k) of an int64 column, states them
// written and then fails (returning an error or panicking) leaves only
// rows [k, n) tainted: a reader of the written rows runs and sees their
// bytes, a reader of the rest is skipped with the chain to the root, and
// the result reads the written range and refuses the rest.
func TestWroteReleasesStatedRowsOfFailedKernel(t *testing.T) {
	const n, k = 8, 3
	boom := errors.New("boom")
	for _, panics := range []bool{false, true} {
		for _, streams := range []int{1, 2} {
			t.Run(fmt.Sprintf("panics=%v/streams=%d", panics, streams), func(t *testing.T) {
				bothTimings(t, func(t *testing.T, timing exec.Option) {
					e := newExecutor(t, streams, timing)
					g := dag.New()
					col := g.AddBuffer("col", 8*n)
					sumLow := dag.AddValue[int64](g, "sum low")
					sumHigh := dag.AddValue[int64](g, "sum high")
					g.AddKernel("fill", func(_ context.Context, l dag.Launch) error {
						b, err := dag.Bytes(l, col)
						if err != nil {
							return err
						}
						for row := range k {
							binary.LittleEndian.PutUint64(b[8*row:], uint64(10+row))
						}
						if err := l.Wrote(col, 0, 8*k); err != nil {
							return err
						}
						if panics {
							panic(boom)
						}
						return boom
					}, dag.Writes(col))
					sum := func(h dag.Value[int64], from, to int) dag.KernelFunc {
						return func(_ context.Context, l dag.Launch) error {
							b, err := dag.Bytes(l, col)
							if err != nil {
								return err
							}
							var s int64
							for row := from; row < to; row++ {
								s += int64(binary.LittleEndian.Uint64(b[8*row:]))
							}
							return dag.Put(l, h, s)
						}
					}
					g.AddKernel("low", sum(sumLow, 0, k), dag.ReadsRange(col, 0, 8*k), dag.Writes(sumLow.ID()), dag.OnStream(0))
					g.AddKernel("high", sum(sumHigh, k, n), dag.ReadsRange(col, 8*k, 8*(n-k)), dag.Writes(sumHigh.ID()), dag.OnStream(1))
					res, err := e.Run(t.Context(), g)
					require.NoError(t, err)
					defer res.Close()

					ls := map[string]exec.LaunchReport{}
					for _, l := range res.Report.Launches() {
						ls[l.Kernel] = l
					}
					assert.Equal(t, exec.StatusFailed, ls["fill"].Status)
					assert.ErrorIs(t, ls["fill"].Err, boom)
					assert.Equal(t, exec.StatusOK, ls["low"].Status)
					require.Equal(t, exec.StatusSkipped, ls["high"].Status)
					assert.Equal(t, []string{"fill"}, ls["high"].Chain)

					got, err := exec.Get(res, sumLow)
					require.NoError(t, err)
					assert.Equal(t, int64(10+11+12), got)
					_, err = exec.Get(res, sumHigh)
					var ue *failgraph.UnwrittenError
					require.ErrorAs(t, err, &ue)
					assert.ErrorIs(t, err, boom)
					assert.Equal(t, []string{"high", "fill"}, ue.Chain)
					assert.Equal(t, "fill", ue.Kernel)

					fv := res.Failures()
					assert.NoError(t, fv.EnsureWritten(buffers.Binding{Buffer: col, Offset: 0, Length: 8 * k}))
					err = fv.EnsureWritten(buffers.Binding{Buffer: col, Offset: 8 * k, Length: 8 * (n - k)})
					require.ErrorAs(t, err, &ue)
					assert.ErrorIs(t, err, boom)
					err = fv.EnsureWritten(buffers.Binding{Buffer: col, Offset: 8*k - 1, Length: 2})
					assert.ErrorIs(t, err, boom, "a read across the edge needs an unwritten byte")
					_, err = res.Buffer(col)
					require.ErrorAs(t, err, &ue)
					assert.ErrorIs(t, err, boom)
				})
			})
		}
	}
}

// Statements of several ranges, of writes declared as adjacent ranges,
// add up; a launch that succeeds has written everything it declared,
// whatever it stated.
func TestWroteStatementsAddUp(t *testing.T) {
	boom := errors.New("boom")
	for _, fails := range []bool{true, false} {
		t.Run(fmt.Sprint("fails=", fails), func(t *testing.T) {
			e := newExecutor(t, 1)
			g := dag.New()
			col := g.AddBuffer("col", 32)
			g.AddKernel("fill", func(_ context.Context, l dag.Launch) error {
				for _, r := range [][2]int64{{0, 4}, {12, 8}, {4, 2}} {
					if err := l.Wrote(col, r[0], r[1]); err != nil {
						return err
					}
				}
				if fails {
					return boom
				}
				return nil
			}, dag.WritesRange(col, 0, 16), dag.WritesRange(col, 16, 16))
			res, err := e.Run(t.Context(), g)
			require.NoError(t, err)
			defer res.Close()
			fv := res.Failures()
			for _, r := range [][2]int64{{0, 6}, {12, 8}} {
				assert.NoError(t, fv.EnsureWritten(buffers.Binding{Buffer: col, Offset: r[0], Length: r[1]}), "stated %v", r)
			}
			for _, r := range [][2]int64{{6, 6}, {20, 12}} {
				err := fv.EnsureWritten(buffers.Binding{Buffer: col, Offset: r[0], Length: r[1]})
				if fails {
					assert.ErrorIs(t, err, boom, "not stated %v", r)
				} else {
					assert.NoError(t, err, "not stated %v, but the kernel succeeded", r)
				}
			}
		})
	}
}

// A statement outside the buffer or outside the kernel's declared writes
// is a *dag.RangeError naming kernel, buffer and range, and one of a
// buffer the kernel does not write a *dag.AccessError; either leaves the
// statements before it in force.
func TestWroteErrors(t *testing.T) {
	boom := errors.New("boom")
	e := newExecutor(t, 1)
	g := dag.New()
	col := g.AddBuffer("col", 32)
	other := g.AddBuffer("other", 8)
	v := dag.AddValue[int64](g, "v")
	errs := map[string]error{}
	g.AddKernel("fill", func(_ context.Context, l dag.Launch) error {
		if err := l.Wrote(col, 0, 8); err != nil {
			return err
		}
		for name, r := range map[string][2]int64{
			"past end": {24, 16}, "negative offset": {-1, 4}, "negative length": {0, -1},
			"past declared": {8, 16}, "before declared": {0, 0} /* empty: ok */, "undeclared": {20, 4},
		} {
			errs[name] = l.Wrote(col, r[0], r[1])
		}
		errs["other"] = l.Wrote(other, 0, 8)
		errs["value"] = l.Wrote(v.ID(), 0, 1)
		errs["value past"] = l.Wrote(v.ID(), 0, 2)
		return boom
	}, dag.WritesRange(col, 0, 16), dag.Writes(v.ID()), dag.Reads(other))
	g.AddKernel("make other", nop, dag.Writes(other))
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	require.ErrorIs(t, res.Err(), boom)

	for name, want := range map[string]string{
		"past end":        `dag: kernel "fill": [24:40) is outside buffer "col", which has 32 bytes`,
		"negative offset": `dag: kernel "fill": [-1:3) is outside buffer "col", which has 32 bytes`,
		"negative length": `dag: kernel "fill": [0:-1) is outside buffer "col", which has 32 bytes`,
		"past declared":   `dag: kernel "fill": [8:24) of buffer "col" is not among its writes`,
		"undeclared":      `dag: kernel "fill": [20:24) of buffer "col" is not among its writes`,
		"value past":      `dag: kernel "fill": [0:2) is outside buffer "v", which has 1 bytes`,
	} {
		var re *dag.RangeError
		if assert.ErrorAs(t, errs[name], &re, name) {
			assert.Equal(t, "fill", re.Kernel, name)
			assert.Equal(t, col == re.Buffer || v.ID() == re.Buffer, true, name)
			assert.EqualError(t, re, want, name)
		}
	}
	assert.NoError(t, errs["before declared"])
	assert.NoError(t, errs["value"])
	var ae *dag.AccessError
	require.ErrorAs(t, errs["other"], &ae)
	assert.Equal(t, dag.AccessError{Kernel: "fill", Buffer: other, Name: "other", Access: dag.AccessWrite}, *ae)

	fv := res.Failures()
	assert.NoError(t, fv.EnsureWritten(buffers.Binding{Buffer: col, Length: 8}), "the first statement stands")
	assert.NoError(t, fv.EnsureWritten(buffers.Binding{Buffer: v.ID(), Length: 1}))
	assert.ErrorIs(t, fv.EnsureWritten(buffers.Binding{Buffer: col, Offset: 8, Length: 8}), boom)
	assert.NoError(t, fv.EnsureWritten(buffers.Binding{Buffer: col, Offset: 16, Length: 16}), "never declared: never tainted")
}
