package exec_test

import (
	"context"
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

// launchesByKernel returns res's launch reports by kernel name.
func launchesByKernel(res *exec.Result) map[string]exec.LaunchReport {
	ls := map[string]exec.LaunchReport{}
	for _, l := range res.Report.Launches() {
		ls[l.Kernel] = l
	}
	return ls
}

// Three writers of disjoint ranges of one buffer, the middle one failing
// (an error or a panic) after stating [8:12) and [22:24) written (the
// first in two adjacent pieces, with an empty statement between): readers
// of written bytes run, on any stream count, whether their range touches
// a statement's end, spans two writers or is empty (at the tainted bytes
// or at the buffer's end); a reader of one tainted byte is skipped with
// the chain and root; the result refuses the buffer and the error graph
// reads exactly [12:22) as unwritten.
func TestWroteSubRangesOfPartialWriters(t *testing.T) {
	boom := errors.New("boom")
	for _, streams := range []int{1, 2, 8} {
		for _, panics := range []bool{false, true} {
			t.Run(fmt.Sprintf("streams=%d/panics=%v", streams, panics), func(t *testing.T) {
				bothTimings(t, func(t *testing.T, timing exec.Option) {
					e := newExecutor(t, streams, timing)
					g := dag.New()
					b := g.AddBuffer("b", 32)
					g.AddKernel("A", func(_ context.Context, l dag.Launch) error {
						x, _ := dag.Bytes(l, b)
						for i := 0; i < 8; i++ {
							x[i] = 1
						}
						return nil
					}, dag.WritesRange(b, 0, 8))
					g.AddKernel("B", func(_ context.Context, l dag.Launch) error {
						x, _ := dag.Bytes(l, b)
						for i := 8; i < 24; i++ {
							x[i] = 2
						}
						if err := l.Wrote(b, 8, 2); err != nil {
							return err
						}
						if err := l.Wrote(b, 10, 2); err != nil {
							return err
						}
						if err := l.Wrote(b, 20, 0); err != nil {
							return err
						}
						if err := l.Wrote(b, 22, 2); err != nil {
							return err
						}
						if panics {
							panic(boom)
						}
						return boom
					}, dag.WritesRange(b, 8, 16))
					g.AddKernel("C", func(_ context.Context, l dag.Launch) error {
						x, _ := dag.Bytes(l, b)
						for i := 24; i < 32; i++ {
							x[i] = 3
						}
						return nil
					}, dag.WritesRange(b, 24, 8))
					type rd struct {
						name    string
						off, n  int64
						wantRun bool
					}
					rds := []rd{
						{"r0_8", 0, 8, true},
						{"r8_12", 8, 4, true},
						{"r2_12", 2, 10, true},
						{"r11_13", 11, 2, false},
						{"r12_13", 12, 1, false},
						{"r19_20", 19, 1, false},
						{"r20_22", 20, 2, false},
						{"r22_24", 22, 2, true},
						{"r23_25", 23, 2, true},
						{"r24_32", 24, 8, true},
						{"r12_0", 12, 0, true},
						{"r32_0", 32, 0, true},
						{"r0_32", 0, 32, false},
					}
					for i, r := range rds {
						out := dag.AddValue[int64](g, "out "+r.name)
						g.AddKernel(r.name, func(_ context.Context, l dag.Launch) error {
							x, err := dag.Bytes(l, b)
							if err != nil {
								return err
							}
							var s int64
							for j := r.off; j < r.off+r.n; j++ {
								s += int64(x[j])
							}
							return dag.Put(l, out, s)
						}, dag.ReadsRange(b, r.off, r.n), dag.Writes(out.ID()), dag.OnStream(i))
					}
					res, err := e.Run(t.Context(), g)
					require.NoError(t, err)
					defer res.Close()
					ls := launchesByKernel(res)
					assert.Equal(t, exec.StatusOK, ls["A"].Status)
					assert.Equal(t, exec.StatusFailed, ls["B"].Status)
					assert.Equal(t, exec.StatusOK, ls["C"].Status)
					for _, r := range rds {
						if r.wantRun {
							assert.Equal(t, exec.StatusOK, ls[r.name].Status, r.name)
						} else {
							assert.Equal(t, exec.StatusSkipped, ls[r.name].Status, r.name)
							assert.ErrorIs(t, ls[r.name].Err, boom, r.name)
							assert.Equal(t, []string{"B"}, ls[r.name].Chain, r.name)
						}
					}
					v := res.Failures()
					assert.NoError(t, v.EnsureWritten(buffers.Binding{Buffer: b, Offset: 0, Length: 12}))
					assert.NoError(t, v.EnsureWritten(buffers.Binding{Buffer: b, Offset: 22, Length: 10}))
					assert.Error(t, v.EnsureWritten(buffers.Binding{Buffer: b, Offset: 12, Length: 10}))
					_, err = res.Buffer(b)
					var ue *failgraph.UnwrittenError
					assert.ErrorAs(t, err, &ue)
					assert.ErrorIs(t, err, boom)
				})
			})
		}
	}
}
