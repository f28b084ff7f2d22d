package exec_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/topology"
)

// A kernel with a Go function and OpenCL C runs on the OpenCL device of
// an executor of the CPU and PoCL when nothing says otherwise (no
// estimate, pin or preference), and where a pin or preference says so,
// on the CPU; both give the same answer.
func TestDeviceCodeRunsOnItsDevice(t *testing.T) {
	const squareCL = `__kernel void square(__global const uint *in, __global uint *out) {
	size_t i = get_global_id(0);
	out[i] = in[i] * in[i];
}`
	const n = 16
	for _, tc := range []struct {
		name string
		opts []dag.KernelOption
		want topology.DeviceID
	}{
		{"no say", nil, topology.OpenCL(0)},
		{"pinned", []dag.KernelOption{dag.OnDevice(topology.CPU)}, topology.CPU},
		{"preferred", []dag.KernelOption{dag.PreferDevice(topology.CPU)}, topology.CPU},
		{"estimated", []dag.KernelOption{dag.Estimate(time.Microsecond)}, topology.DeviceID{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := dag.New()
			in, out := g.AddBuffer("in", 4*n), g.AddBuffer("out", 4*n)
			g.AddKernel("fill", func(_ context.Context, l dag.Launch) error {
				b, err := dag.Bytes(l, in)
				if err != nil {
					return err
				}
				for i := range n {
					binary.LittleEndian.PutUint32(b[4*i:], uint32(i))
				}
				return nil
			}, dag.Writes(in))
			opts := append([]dag.KernelOption{dag.Reads(in), dag.Writes(out),
				dag.OpenCL(squareCL, "square", func(argBytes []int64) dag.Shape {
					return dag.Shape{Global: []int{int(argBytes[0] / 4)}}
				}, dag.BufferArg(in), dag.BufferArg(out))}, tc.opts...)
			g.AddKernel("square", func(_ context.Context, l dag.Launch) error {
				src, err := dag.Bytes(l, in)
				if err != nil {
					return err
				}
				dst, err := dag.Bytes(l, out)
				if err != nil {
					return err
				}
				for i := range n {
					v := binary.LittleEndian.Uint32(src[4*i:])
					binary.LittleEndian.PutUint32(dst[4*i:], v*v)
				}
				return nil
			}, opts...)
			e := cpuAnd(t, 2, openCLDevice(t, 2))
			res, err := e.Run(t.Context(), g)
			require.NoError(t, err)
			defer res.Close()
			require.NoError(t, res.Err())
			for _, l := range res.Report.Launches() {
				if l.Kernel == "square" && tc.want != (topology.DeviceID{}) {
					assert.Equal(t, tc.want, l.Device)
				}
			}
			b, err := res.Buffer(out)
			require.NoError(t, err)
			for i := range n {
				assert.Equal(t, uint32(i*i), binary.LittleEndian.Uint32(b.Bytes()[4*i:]), "out[%d]", i)
			}
		})
	}
}
