package exec_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/topology"
)

// simMachine returns an executor over simulated GPUs of an embedded
// machine, and its topology.
func simMachine(t *testing.T, name string, streams int, opts ...exec.Option) (*exec.Executor, *topology.Topology) {
	t.Helper()
	return lossyMachine(t, name, streams, nil, opts...)
}

// lossyMachine is simMachine whose simulated GPUs are made with loss (a
// sim.WithLoss or sim.WithLossAfter; nil: none).
func lossyMachine(t *testing.T, name string, streams int, loss sim.Option, opts ...exec.Option) (*exec.Executor, *topology.Topology) {
	t.Helper()
	m, err := topology.LoadMachine(name)
	require.NoError(t, err)
	return simExecutor(t, m, streams, loss, opts...)
}

// simExecutor returns an executor over simulated GPUs of machine m (made
// with loss; nil: none), and its topology.
func simExecutor(t *testing.T, m topology.Machine, streams int, loss sim.Option, opts ...exec.Option) (*exec.Executor, *topology.Topology) {
	t.Helper()
	topo, gpus := gpusOf(t, m)
	set, err := sim.New(gpus, sim.WithStreams(streams), loss)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	e, err := exec.NewMulti(set.Devices(), topo, append([]exec.Option{exec.WithAllocator(leaktest.Allocator(t))}, opts...)...)
	require.NoError(t, err)
	return e, topo
}

// machineGPUs returns an embedded machine's topology and its GPUs, each
// with the machine's memory.
func machineGPUs(t *testing.T, name string) (*topology.Topology, []topology.DeviceFacts) {
	t.Helper()
	m, err := topology.LoadMachine(name)
	require.NoError(t, err)
	return gpusOf(t, m)
}

// gpusOf returns machine m's topology and its GPUs, each with the
// machine's memory.
func gpusOf(t *testing.T, m topology.Machine) (*topology.Topology, []topology.DeviceFacts) {
	t.Helper()
	topo, err := topology.New(m.Facts, topology.WithGPUSpec(m.Spec))
	require.NoError(t, err)
	gpus := topo.GPUs()
	for i := range gpus {
		gpus[i].MemoryBytes = m.MemoryBytes
	}
	return topo, gpus
}

func TestCopyAcrossSimulatedGPUs(t *testing.T) {
	cases := []struct {
		machine  string
		from, to topology.DeviceID
		link     string
		route    string
		viaHost  bool
	}{
		{"dgx1-v100", topology.GPU(0), topology.GPU(3), "NV2", "direct", false},
		{"dgx1-v100", topology.GPU(0), topology.GPU(5), "SYS", "via gpu1", false},
		{"rtx5090-2gpu-no-p2p", topology.GPU(0), topology.GPU(1), "PHB", "via host", true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s-%s", c.machine, c.from, c.to), func(t *testing.T) {
			e, _ := simMachine(t, c.machine, 2)
			g := dag.New()
			x := g.AddBuffer("x", 1<<20)
			y := g.AddBuffer("y", 8)
			g.AddKernel("produce", func(_ context.Context, l dag.Launch) error {
				if l.Device() != c.from {
					return fmt.Errorf("produce ran on %s", l.Device())
				}
				b := bytesOf(l, x)
				for i := range b {
					b[i] = byte(i)
				}
				return nil
			}, dag.Writes(x), dag.OnDevice(c.from))
			g.AddKernel("consume", func(_ context.Context, l dag.Launch) error {
				if l.Device() != c.to {
					return fmt.Errorf("consume ran on %s", l.Device())
				}
				var sum uint64
				for _, v := range bytesOf(l, x) {
					sum += uint64(v)
				}
				binary.LittleEndian.PutUint64(bytesOf(l, y), sum)
				return nil
			}, dag.Reads(x), dag.Writes(y), dag.OnDevice(c.to))
			p, err := e.Plan(g)
			require.NoError(t, err)
			assert.Equal(t, 1, p.Copies(), p.String())
			res, err := e.Execute(t.Context(), p)
			require.NoError(t, err)
			defer res.Close()
			require.NoError(t, res.Err())
			b, err := res.Buffer(y)
			require.NoError(t, err)
			assert.Equal(t, uint64((1<<20)/256*(255*256/2)), binary.LittleEndian.Uint64(b.Bytes()))
			require.Len(t, res.Report.Copies, 1)
			cp := res.Report.Copies[0]
			assert.Equal(t, int64(1<<20), cp.Bytes)
			assert.Equal(t, c.link, cp.Link)
			assert.Equal(t, c.route, cp.Route)
			assert.Equal(t, c.viaHost, cp.ViaHost)
			assert.Positive(t, cp.Modeled)
			link := c.link
			if c.viaHost {
				link = "host"
			}
			assert.Equal(t, int64(1<<20), res.Report.BytesByLink[link])
		})
	}
}

// A failure before a copy skips the copy and the kernel after it, with one
// failure id and a chain through the copy.
func TestFailureCrossesCopies(t *testing.T) {
	e, _ := simMachine(t, "dgx1-v100", 1)
	g := dag.New()
	x, y := g.AddBuffer("x", 64), g.AddBuffer("y", 8)
	g.AddKernel("produce", func(context.Context, dag.Launch) error { return errors.New("boom") }, dag.Writes(x), dag.OnDevice(topology.GPU(0)))
	g.AddKernel("consume", nop, dag.Reads(x), dag.Writes(y), dag.OnDevice(topology.GPU(7)))
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	_, err = res.Buffer(y)
	var ue *failgraph.UnwrittenError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, []string{"consume", "copy x gpu0→gpu7", "produce"}, ue.Chain)
}

func TestPlacementRules(t *testing.T) {
	e, _ := simMachine(t, "dgx1-v100", 1)
	t.Run("pin to an unknown device", func(t *testing.T) {
		g := dag.New()
		g.AddKernel("k", nop, dag.OnDevice(topology.GPU(9)))
		_, err := e.Plan(g)
		assert.ErrorContains(t, err, `kernel "k" is pinned to gpu9`)
	})
	t.Run("writers of one buffer pinned apart", func(t *testing.T) {
		g := dag.New()
		b := g.AddBuffer("b", 16)
		g.AddKernel("lo", nop, dag.WritesRange(b, 0, 8), dag.OnDevice(topology.GPU(2)))
		g.AddKernel("hi", nop, dag.WritesRange(b, 8, 8), dag.OnDevice(topology.GPU(3)))
		p, err := e.Plan(g)
		require.NoError(t, err)
		assert.Equal(t, []int{2, 3}, p.Placement().Device)
	})
	t.Run("independent heavy kernels spread", func(t *testing.T) {
		g := dag.New()
		for i := range 8 {
			g.AddKernel(fmt.Sprint("k", i), nop, dag.Estimate(time.Millisecond))
		}
		p, err := e.Plan(g)
		require.NoError(t, err)
		seen := map[int]bool{}
		for _, d := range p.Placement().Device {
			seen[d] = true
		}
		assert.Len(t, seen, 8, "one kernel per GPU")
		assert.Equal(t, time.Millisecond, p.Placement().Makespan)
	})
	t.Run("a chain with big buffers stays on one device", func(t *testing.T) {
		g := dag.New()
		prev := g.AddBuffer("b0", 256<<20)
		g.AddKernel("k0", nop, dag.Writes(prev))
		for i := 1; i < 5; i++ {
			next := g.AddBuffer(fmt.Sprint("b", i), 256<<20)
			g.AddKernel(fmt.Sprint("k", i), nop, dag.Reads(prev), dag.Writes(next))
			prev = next
		}
		p, err := e.Plan(g)
		require.NoError(t, err)
		assert.Equal(t, 0, p.Copies())
		assert.Zero(t, p.Placement().BytesMoved)
	})
}
