package exec_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/topology"
)

var strategies = []exec.Placement{exec.PlaceHEFT, exec.PlaceRoundRobin, exec.PlaceLeastLoaded}

// span is a byte range [off, off+n) of raw buffer buf.
type span struct {
	buf    dag.BufferID
	off, n int64
}

// fill returns a kernel that writes, into span i, the bytes tag+16i,
// tag+16i+1, …
func fill(tag byte, spans ...span) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		for i, sp := range spans {
			b := bytesOf(l, sp.buf)[sp.off : sp.off+sp.n]
			for j := range b {
				b[j] = tag + byte(16*i+j)
			}
		}
		return nil
	}
}

// concat returns a kernel that writes the bytes of ins, one after the
// other, into out.
func concat(out dag.BufferID, ins ...dag.BufferID) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		b := bytesOf(l, out)
		for _, in := range ins {
			b = b[copy(b, bytesOf(l, in)):]
		}
		return nil
	}
}

// runBytes runs g on e and returns the bytes of each buffer of want, in
// order, requiring a clean run.
func runBytes(t *testing.T, e *exec.Executor, g *dag.Graph, want []dag.BufferID, msg string) [][]byte {
	t.Helper()
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err, msg)
	defer res.Close()
	require.NoError(t, res.Err(), msg)
	var out [][]byte
	for _, id := range want {
		b, err := res.Buffer(id)
		require.NoError(t, err, msg)
		out = append(out, append([]byte(nil), b.Bytes()...))
	}
	return out
}

// TestPlacementSharedPartialWriters: k3 writes the second half of a
// (whose first half k1 writes) and of b (whose first half k2 writes). No
// kernel is pinned, so the graph is valid on any machine: every strategy
// must plan it, and the run must give the single-device bytes, on 1 and 2
// streams per device, wherever the writers of a and b run.
func TestPlacementSharedPartialWriters(t *testing.T) {
	build := func() (*dag.Graph, []dag.BufferID) {
		g := dag.New()
		a, b := g.AddBuffer("a", 16), g.AddBuffer("b", 16)
		out := g.AddBuffer("out", 32)
		heavy := dag.Estimate(time.Millisecond) // worth spreading k1 and k2
		g.AddKernel("k1", fill(0x10, span{a, 0, 8}), dag.WritesRange(a, 0, 8), heavy)
		g.AddKernel("k2", fill(0x40, span{b, 0, 8}), dag.WritesRange(b, 0, 8), heavy)
		g.AddKernel("k3", fill(0x80, span{a, 8, 8}, span{b, 8, 8}), dag.WritesRange(a, 8, 8), dag.WritesRange(b, 8, 8))
		g.AddKernel("k4", concat(out, a, b), dag.Reads(a, b), dag.Writes(out))
		return g, []dag.BufferID{a, b, out}
	}
	g, bufs := build()
	want := runBytes(t, newExecutor(t, 1), g, bufs, "single device")
	require.Equal(t, []byte{0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87}, want[0])
	require.Equal(t, []byte{0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97}, want[1])
	for _, s := range strategies {
		for _, streams := range []int{1, 2} {
			t.Run(fmt.Sprintf("%v/streams=%d", s, streams), func(t *testing.T) {
				e, _ := simMachine(t, "dgx1-v100", streams, exec.WithPlacement(s))
				g, bufs := build()
				_, err := e.Plan(g)
				require.NoError(t, err)
				assert.Equal(t, want, runBytes(t, e, g, bufs, s.String()))
			})
		}
	}
}

// TestPlacementWriterGroups: random graphs whose first layer of kernels
// writes random byte ranges of several buffers (so the writers of one
// buffer are tied to the writers of others through kernels that write
// both) and whose second layer reads whole buffers. Every strategy plans
// them, and the run gives the single-device bytes.
func TestPlacementWriterGroups(t *testing.T) {
	const seeds = 40
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, seed))
		build := randomWriterGraph(rng)
		g, bufs := build()
		want := runBytes(t, newExecutor(t, 1), g, bufs, fmt.Sprint("single device, seed ", seed))
		for _, s := range strategies {
			streams := 1 + int(seed%2)
			e, _ := simMachine(t, "dgx1-v100", streams, exec.WithPlacement(s))
			g, bufs := build()
			msg := fmt.Sprintf("seed %d, %v, %d streams", seed, s, streams)
			_, err := e.Plan(g)
			require.NoError(t, err, msg)
			assert.Equal(t, want, runBytes(t, e, g, bufs, msg), msg)
		}
	}
}

// randomWriterGraph returns a builder of one random two-layer graph (the
// same graph at each call): 2–6 buffers of 8–32 bytes, each cut into 1–3
// ranges dealt to 2–6 writer kernels, then 1–4 reader kernels that each
// concatenate 1–3 whole buffers into an output.
func randomWriterGraph(rng *rand.Rand) func() (*dag.Graph, []dag.BufferID) {
	type rangeW struct {
		buf      int
		off, len int64
	}
	nbuf, nwriters := 2+rng.IntN(5), 2+rng.IntN(5)
	sizes := make([]int64, nbuf)
	writes := make([][]rangeW, nwriters)
	for b := range nbuf {
		sizes[b] = 8 * int64(1+rng.IntN(4))
		cuts := []int64{0, sizes[b]}
		for range rng.IntN(3) {
			c := 8 * int64(rng.IntN(int(sizes[b]/8)))
			if c > 0 && !slices.Contains(cuts, c) {
				cuts = append(cuts, c)
			}
		}
		slices.Sort(cuts)
		for i := range len(cuts) - 1 {
			w := rng.IntN(nwriters)
			writes[w] = append(writes[w], rangeW{b, cuts[i], cuts[i+1] - cuts[i]})
		}
	}
	type reader struct{ bufs []int }
	readers := make([]reader, 1+rng.IntN(4))
	for i := range readers {
		for range 1 + rng.IntN(3) {
			readers[i].bufs = append(readers[i].bufs, rng.IntN(nbuf))
		}
	}
	estimates := make([]time.Duration, nwriters)
	for i := range estimates {
		estimates[i] = time.Duration(1+rng.IntN(1000)) * time.Microsecond
	}
	return func() (*dag.Graph, []dag.BufferID) {
		g := dag.New()
		ids := make([]dag.BufferID, nbuf)
		for b := range nbuf {
			ids[b] = g.AddBuffer(fmt.Sprint("buf", b), sizes[b])
		}
		for w, ws := range writes {
			opts := []dag.KernelOption{dag.Estimate(estimates[w])}
			var spans []span
			for _, r := range ws {
				opts = append(opts, dag.WritesRange(ids[r.buf], r.off, r.len))
				spans = append(spans, span{ids[r.buf], r.off, r.len})
			}
			g.AddKernel(fmt.Sprint("w", w), fill(byte(32*w), spans...), opts...)
		}
		all := append([]dag.BufferID(nil), ids...)
		for i, r := range readers {
			var in []dag.BufferID
			var n int64
			for _, b := range r.bufs {
				in = append(in, ids[b])
				n += sizes[b]
			}
			out := g.AddBuffer(fmt.Sprint("out", i), n)
			g.AddKernel(fmt.Sprint("r", i), concat(out, in...), dag.Reads(in...), dag.Writes(out))
			all = append(all, out)
		}
		return g, all
	}
}

// TestPlacementSplitPins: pins that put the writers of one buffer on
// different devices plan, and the run gives the single-device bytes: each
// writer writes its range on its own device and the plan copies those
// bytes to the buffer's readers.
func TestPlacementSplitPins(t *testing.T) {
	build := func(pin bool) (*dag.Graph, []dag.BufferID) {
		g := dag.New()
		a, b := g.AddBuffer("a", 16), g.AddBuffer("b", 16)
		out := g.AddBuffer("out", 32)
		on := func(d int) []dag.KernelOption {
			if !pin {
				return nil
			}
			return []dag.KernelOption{dag.OnDevice(topology.GPU(d))}
		}
		g.AddKernel("k1", fill(0x10, span{a, 0, 8}), append(on(1), dag.WritesRange(a, 0, 8))...)
		g.AddKernel("k2", fill(0x40, span{b, 0, 8}), append(on(2), dag.WritesRange(b, 0, 8))...)
		g.AddKernel("k3", fill(0x80, span{a, 8, 8}, span{b, 8, 8}), append(on(3), dag.WritesRange(a, 8, 8), dag.WritesRange(b, 8, 8))...)
		g.AddKernel("k4", concat(out, a, b), append(on(4), dag.Reads(a, b), dag.Writes(out))...)
		return g, []dag.BufferID{a, b, out}
	}
	g, bufs := build(false)
	want := runBytes(t, newExecutor(t, 1), g, bufs, "single device")
	e, _ := simMachine(t, "dgx1-v100", 1)
	g, bufs = build(true)
	p, err := e.Plan(g)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 3, 4}, p.Placement().Device)
	assert.Equal(t, want, runBytes(t, e, g, bufs, "pinned apart"))
}

// TestDeviceLossSharedPartialWriters: when the device of k1 (a writer of
// part of a buffer that k3 also writes) is lost at the start, recovery
// moves what ran there to surviving devices and the bytes are the
// single-device ones, under every strategy.
func TestDeviceLossSharedPartialWriters(t *testing.T) {
	build := func() (*dag.Graph, []dag.BufferID) {
		g := dag.New()
		a, b := g.AddBuffer("a", 16), g.AddBuffer("b", 16)
		out := g.AddBuffer("out", 32)
		g.AddKernel("k1", fill(0x10, span{a, 0, 8}), dag.WritesRange(a, 0, 8))
		g.AddKernel("k2", fill(0x40, span{b, 0, 8}), dag.WritesRange(b, 0, 8))
		g.AddKernel("k3", fill(0x80, span{a, 8, 8}, span{b, 8, 8}), dag.WritesRange(a, 8, 8), dag.WritesRange(b, 8, 8))
		g.AddKernel("k4", concat(out, a, b), dag.Reads(a, b), dag.Writes(out))
		return g, []dag.BufferID{a, b, out}
	}
	g, bufs := build()
	want := runBytes(t, newExecutor(t, 1), g, bufs, "single device")
	for _, s := range strategies {
		t.Run(s.String(), func(t *testing.T) {
			plain, _ := simMachine(t, "dgx1-v100", 1, exec.WithPlacement(s))
			g, bufs := build()
			p, err := plain.Plan(g)
			require.NoError(t, err)
			lost := p.Devices()[p.Placement().Device[0]]
			e, _ := lossyMachine(t, "dgx1-v100", 1, sim.WithLoss(lost, 0), exec.WithPlacement(s))
			res, err := e.Run(t.Context(), g)
			require.NoError(t, err)
			defer res.Close()
			require.NoError(t, res.Err())
			require.NotNil(t, res.Report.Lost)
			final := map[string]topology.DeviceID{}
			for _, l := range res.Report.Launches() {
				final[l.Kernel] = l.Device
			}
			assert.NotEqual(t, lost, final["k1"])
			for i, id := range bufs {
				b, err := res.Buffer(id)
				require.NoError(t, err)
				assert.Equal(t, want[i], b.Bytes(), g.Buffer(id).Name)
			}
		})
	}
}
