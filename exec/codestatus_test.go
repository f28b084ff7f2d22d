package exec_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/topology"
)

// Two OpenCL launches write the two halves of one buffer, each reading
// its half of the input; the first fails by its status word on odd input.
// Over runs of one plan that keeps its device memory, alternating between
// failing and succeeding, the host reader of the second half always runs
// and sees its bytes, the reader of the first half is skipped (its chain
// the copy home and the launch) exactly when that launch failed, and a
// run after a failed one reads the new bytes.
func TestCodeDeviceStatusTaintsOnlyItsRange(t *testing.T) {
	for _, q := range []int{1, 3} {
		t.Run(fmt.Sprint(q), func(t *testing.T) {
			cl := openCLDevice(t, q)
			a := argAlign(cl)
			e := cpuAnd(t, 2, cl)
			g := dag.New()
			in := g.AddBuffer("in", 2*a)
			out := g.AddBuffer("out", 2*a)
			var first atomic.Uint64
			g.AddKernel("src", func(_ context.Context, l dag.Launch) error {
				x, _ := dag.Bytes(l, in)
				binary.LittleEndian.PutUint64(x[0:], first.Load())
				binary.LittleEndian.PutUint64(x[a:], 4)
				return nil
			}, dag.Writes(in))
			for i := int64(0); i < 2; i++ {
				g.AddKernel(fmt.Sprint("c", i), nil, dag.ReadsRange(in, i*a, 8), dag.WritesRange(out, i*a, a), dag.OnStream(int(i)),
					dag.OnDevice(cl.ID()),
					dag.OpenCL(checkCL, "check", ulongs, dag.BufferArg(in), dag.BufferArg(out), dag.StatusArg()))
			}
			r0, r1 := dag.AddValue[uint64](g, "r0"), dag.AddValue[uint64](g, "r1")
			for i, r := range []dag.Value[uint64]{r0, r1} {
				g.AddKernel(fmt.Sprint("read", i), func(_ context.Context, l dag.Launch) error {
					x, _ := dag.Bytes(l, out)
					var s uint64
					for j := int64(i) * a; j < int64(i+1)*a; j += 8 {
						s += binary.LittleEndian.Uint64(x[j:])
					}
					return dag.Put(l, r, s)
				}, dag.ReadsRange(out, int64(i)*a, a), dag.Writes(r.ID()), dag.OnDevice(topology.CPU), dag.OnStream(i))
			}
			p, err := e.Plan(g)
			require.NoError(t, err)
			for k, v := range []uint64{3, 6, 5, 8, 8, 1} {
				first.Store(v)
				res, err := e.Execute(t.Context(), p, exec.WithKeepDeviceMemory())
				require.NoError(t, err)
				ls := launchesByKernel(res)
				n, err := exec.Get(res, r1)
				assert.NoError(t, err, "run %d", k)
				assert.Equal(t, uint64(4), n, "run %d", k)
				n, err = exec.Get(res, r0)
				if v%2 == 1 {
					var se *exec.StatusError
					assert.ErrorAs(t, err, &se, "run %d", k)
					assert.Equal(t, exec.StatusFailed, ls["c0"].Status)
					assert.Equal(t, exec.StatusSkipped, ls["read0"].Status)
					assert.Equal(t, []string{"copy out[0:128) opencl0→cpu", "c0"}, ls["read0"].Chain)
				} else {
					assert.NoError(t, err, "run %d", k)
					assert.Equal(t, v, n, "run %d", k)
				}
				_, err = res.Buffer(out)
				assert.Equal(t, v%2 == 1, err != nil)
				require.NoError(t, res.Close())
			}
			p.ReleaseDeviceMemory()
		})
	}
}
