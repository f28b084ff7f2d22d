package exec_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/topology"
)

// twoSimGPUs returns an executor over two simulated GPUs with no
// topology, made with opts (a loss: sim.WithLoss, say).
func twoSimGPUs(t *testing.T, streams int, opts ...sim.Option) *exec.Executor {
	t.Helper()
	set, err := sim.New([]topology.DeviceFacts{{ID: topology.GPU(0)}, {ID: topology.GPU(1)}}, append([]sim.Option{sim.WithStreams(streams)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	e, err := exec.NewMulti(set.Devices(), nil, exec.WithAllocator(leaktest.Allocator(t)))
	require.NoError(t, err)
	return e
}

// putU64 is a kernel writing v into bytes [off, off+8) of raw buffer
// out, or failing with err when it is not nil.
func putU64(out dag.BufferID, off int, v uint64, err error) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(bytesOf(l, out)[off:], v)
		return nil
	}
}

// A replica holds the bytes its readers need, copied after the last write
// of those bytes: A and C write the two halves of x on gpu0; B and D read
// them on gpu1, B first. D must see C's bytes, and when C fails D must be
// skipped with C's failure while B, whose bytes are clean, runs.
func TestReplicaFollowsEveryWriter(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		cErr  error
		empty bool // B reads an empty range of x
	}{
		{"C succeeds", nil, false},
		{"C succeeds, B reads nothing", nil, true},
		{"C fails", boom, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, streams := range []int{1, 2} {
				e := twoSimGPUs(t, streams)
				g := dag.New()
				x := g.AddBuffer("x", 16)
				yb, yd := g.AddBuffer("yb", 8), g.AddBuffer("yd", 8)
				z := g.AddBuffer("z", 8)
				copyIn := func(in, out dag.BufferID) dag.KernelFunc {
					return func(_ context.Context, l dag.Launch) error {
						copy(bytesOf(l, out), bytesOf(l, in))
						return nil
					}
				}
				g.AddKernel("A", putU64(x, 0, 1, nil), dag.WritesRange(x, 0, 8), dag.OnDevice(topology.GPU(0)))
				bLen := int64(8)
				if tc.empty {
					bLen = 0
				}
				g.AddKernel("B", func(_ context.Context, l dag.Launch) error {
					copy(bytesOf(l, yb), bytesOf(l, x)[0:bLen])
					return nil
				}, dag.ReadsRange(x, 0, bLen), dag.Writes(yb), dag.OnDevice(topology.GPU(1)))
				// Work after B ranks it before C in the launch order.
				zb := g.AddBuffer("zb", 8)
				g.AddKernel("after B", copyIn(yb, zb), dag.Reads(yb), dag.Writes(zb), dag.OnDevice(topology.GPU(1)))
				g.AddKernel("after that", copyIn(zb, z), dag.Reads(zb), dag.Writes(z), dag.OnDevice(topology.GPU(1)))
				g.AddKernel("C", putU64(x, 8, 2, tc.cErr), dag.WritesRange(x, 8, 8), dag.OnDevice(topology.GPU(0)))
				g.AddKernel("D", func(_ context.Context, l dag.Launch) error {
					copy(bytesOf(l, yd), bytesOf(l, x)[8:16])
					return nil
				}, dag.ReadsRange(x, 8, 8), dag.Writes(yd), dag.OnDevice(topology.GPU(1)))
				res, err := e.Run(t.Context(), g)
				require.NoError(t, err)
				status := map[string]exec.Status{}
				for _, l := range res.Report.Launches() {
					status[l.Kernel] = l.Status
				}
				if !tc.empty {
					b, err := res.Buffer(z)
					require.NoError(t, err, "B's bytes are clean")
					assert.Equal(t, uint64(1), binary.LittleEndian.Uint64(b.Bytes()), "streams=%d", streams)
				}
				d, err := res.Buffer(yd)
				if tc.cErr == nil {
					require.NoError(t, err)
					assert.Equal(t, uint64(2), binary.LittleEndian.Uint64(d.Bytes()), "D reads C's bytes (streams=%d)", streams)
					assert.Equal(t, exec.StatusOK, status["D"])
				} else {
					var ue *failgraph.UnwrittenError
					require.ErrorAs(t, err, &ue, "D's input failed (streams=%d)", streams)
					assert.Equal(t, "C", ue.Kernel)
					assert.ErrorIs(t, err, boom)
					assert.Equal(t, exec.StatusSkipped, status["D"])
					assert.Equal(t, exec.StatusOK, status["B"], "B's bytes are clean")
				}
				_, err = res.Buffer(x)
				if tc.cErr == nil {
					assert.NoError(t, err)
				} else {
					assert.ErrorIs(t, err, boom)
				}
				res.Close()
			}
		})
	}
}

// A copy moves only the bytes a read needs and the replica does not hold
// yet: three readers of x on gpu1 cost two 8-byte copies, one per
// writer's range, and a reader of no bytes costs none.
func TestCopiesMoveOnlyNeededBytes(t *testing.T) {
	e := twoSimGPUs(t, 2)
	g := dag.New()
	x := g.AddBuffer("x", 16)
	g.AddKernel("A", putU64(x, 0, 1, nil), dag.WritesRange(x, 0, 8), dag.OnDevice(topology.GPU(0)))
	g.AddKernel("C", putU64(x, 8, 2, nil), dag.WritesRange(x, 8, 8), dag.OnDevice(topology.GPU(0)))
	// sum adds the words of x[off, off+n): a kernel touches only the
	// bytes it declared (the rest of the replica may be written by a copy
	// on another stream meanwhile).
	sum := func(off, n int64, out dag.BufferID) dag.KernelFunc {
		return func(_ context.Context, l dag.Launch) error {
			var s uint64
			for i := off; i+8 <= off+n; i += 8 {
				s += binary.LittleEndian.Uint64(bytesOf(l, x)[i:])
			}
			binary.LittleEndian.PutUint64(bytesOf(l, out), s)
			return nil
		}
	}
	outs := map[string]dag.BufferID{}
	for _, r := range []struct {
		name   string
		off, n int64
	}{{"B", 0, 8}, {"D", 8, 8}, {"E", 0, 16}, {"F", 4, 0}} {
		out := g.AddBuffer("out"+r.name, 8)
		outs[r.name] = out
		g.AddKernel(r.name, sum(r.off, r.n, out), dag.ReadsRange(x, r.off, r.n), dag.Writes(out), dag.OnDevice(topology.GPU(1)))
	}
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, res.Err())
	var copied []string
	for _, c := range res.Report.Copies {
		copied = append(copied, fmt.Sprintf("%s %d", c.Buffer, c.Bytes))
	}
	assert.ElementsMatch(t, []string{"x 8", "x 8"}, copied)
	b, err := res.Buffer(outs["E"])
	require.NoError(t, err)
	assert.Equal(t, uint64(3), binary.LittleEndian.Uint64(b.Bytes()), "E sees both writers' bytes")
}
