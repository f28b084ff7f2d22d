package k2k_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/k2k"
	"github.com/streamdag/streamdag/placement"
	"github.com/streamdag/streamdag/topology"
)

// inbox collects what a kernel's handler was given.
type inbox struct {
	mu   sync.Mutex
	ids  []uint64
	data [][]byte
	on   []topology.DeviceID
}

func (b *inbox) handler(ctx context.Context, d *k2k.Delivery) error {
	got, err := d.ReadBack(ctx)
	if err != nil {
		return err
	}
	dev := d.Message.To
	if m := d.Memory(); m != nil {
		dev = m.Device()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ids = append(b.ids, d.Message.ID)
	b.data = append(b.data, got)
	b.on = append(b.on, dev)
	return nil
}

// newRouter returns a Router over c and devs with a checked allocator,
// closed at cleanup (before the allocator's check).
func newRouter(t *testing.T, c *placement.Coordinator, devs []gpu.Device) *k2k.Router {
	t.Helper()
	r, err := k2k.New(c, devs, k2k.WithAllocator(leaktest.Allocator(t)))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	return r
}

func TestRouteOnRealTopologies(t *testing.T) {
	g := topology.GPU
	cases := []struct {
		file     string
		from, to topology.DeviceID
		kind     topology.RouteKind
		path     []topology.DeviceID
	}{
		{"dgx1-v100.json", g(0), g(0), topology.RouteSame, []topology.DeviceID{g(0)}},
		{"dgx1-v100.json", g(0), g(3), topology.RouteDirect, []topology.DeviceID{g(0), g(3)}},       // NV2
		{"dgx1-v100.json", g(0), g(1), topology.RouteDirect, []topology.DeviceID{g(0), g(1)}},       // NV1
		{"dgx1-v100.json", g(0), g(5), topology.RouteViaGPU, []topology.DeviceID{g(0), g(1), g(5)}}, // SYS: NV1+NV2 via gpu1 ties NV2+NV1 via gpu4; lowest index
		{"dgx1-v100.json", g(7), g(0), topology.RouteViaGPU, []topology.DeviceID{g(7), g(4), g(0)}}, // NV2+NV2 beats NV1+NV2 via gpu3
		{"dgx1-v100.json", topology.CPU, g(2), topology.RouteDirect, []topology.DeviceID{topology.CPU, g(2)}},
		{"dgx-a100.json", g(0), g(7), topology.RouteDirect, []topology.DeviceID{g(0), g(7)}},
		{"rtx5090-2gpu-no-p2p.json", g(0), g(1), topology.RouteViaHost, []topology.DeviceID{g(0), topology.CPU, g(1)}}, // PHB, GNS
		{"pcie-8gpu-2socket.json", g(0), g(4), topology.RouteViaHost, []topology.DeviceID{g(0), topology.CPU, g(4)}},   // SYS, and no GPU has P2P to both sockets
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s-%s", tc.file, tc.from, tc.to), func(t *testing.T) {
			topo := machine(t, tc.file)
			devs := append(simGPUs(t, topo), cpuDevice(t))
			_, r := routed(t, topo, devs)
			kind, path := r.Route(1<<20, tc.from, tc.to)
			assert.Equal(t, tc.kind, kind)
			assert.Equal(t, tc.path, path)
			if tc.from.Kind == topology.KindGPU && tc.to.Kind == topology.KindGPU && !topo.CanP2P(tc.from, tc.to) && tc.from != tc.to {
				best, err := topo.Route(1<<20, tc.from, tc.to)
				require.NoError(t, err)
				assert.Equal(t, best.Path, path, "without direct P2P, the topology's cheapest route")
			}
			m, err := r.Send(context.Background(), kernelOn(tc.from), kernelOn(tc.to), payload(1, 1<<10))
			require.NoError(t, err)
			assert.Equal(t, tc.kind, m.Route, "Send routes as Route for its size")
			assert.Equal(t, tc.path, m.Path)
			assert.Equal(t, 1, r.Pending(tc.from, tc.to), "queued under the endpoint pair whatever the route")
			var in inbox
			require.NoError(t, r.Handle(kernelOn(tc.to), in.handler))
			out, err := r.Drain(context.Background(), tc.from, tc.to)
			require.NoError(t, err)
			require.Len(t, out, 1)
			require.NoError(t, out[0].Err)
			assert.Equal(t, [][]byte{payload(1, 1<<10)}, in.data)
		})
	}
}

func TestRouteRules(t *testing.T) {
	topo := embedded(t, "dgx1-v100")
	devs := simGPUs(t, topo)
	g := topology.GPU

	// P2P disabled: every GPU pair goes through the host, even on NVLink.
	c, err := placement.NewCoordinator(placement.WithTopology(topo), placement.WithoutP2P())
	require.NoError(t, err)
	for _, d := range devs {
		c.Register(placement.DeviceInfo{ID: d.ID()})
	}
	r := newRouter(t, c, devs)
	kind, _ := r.Route(1<<20, g(0), g(3))
	assert.Equal(t, topology.RouteViaHost, kind)
	kind, _ = r.Route(1<<20, g(0), g(5))
	assert.Equal(t, topology.RouteViaHost, kind)

	// An intermediate GPU the router does not hold is never crossed:
	// with gpu1 and gpu4 absent, gpu0→gpu5 has no two-hop P2P path.
	var some []gpu.Device
	for _, d := range devs {
		if d.ID() != g(1) && d.ID() != g(4) {
			some = append(some, d)
		}
	}
	r = newRouter(t, coordinator(t, topo, devs), some)
	kind, path := r.Route(1<<20, g(0), g(5))
	assert.Equal(t, topology.RouteViaHost, kind)
	assert.Equal(t, []topology.DeviceID{g(0), topology.CPU, g(5)}, path)

	// No topology: GPUs go through the host.
	r = newRouter(t, coordinator(t, nil, devs), devs)
	kind, _ = r.Route(1<<20, g(0), g(3))
	assert.Equal(t, topology.RouteViaHost, kind)
}

func TestSendErrors(t *testing.T) {
	topo := embedded(t, "dgx1-v100")
	devs := simGPUs(t, topo)
	c := coordinator(t, topo, devs)
	r := newRouter(t, c, devs[:2])
	ctx := context.Background()

	_, err := r.Send(ctx, "nope", "kgpu1", nil)
	var uk *k2k.UnknownKernelError
	require.ErrorAs(t, err, &uk)
	assert.Equal(t, k2k.UnknownKernelError{Kernel: "nope", Role: "source"}, *uk)
	assert.ErrorIs(t, err, placement.ErrKernelNotFound)
	assert.EqualError(t, err, `k2k: unknown source kernel "nope"`)

	_, err = r.Send(ctx, "kgpu0", "gone", nil)
	require.ErrorAs(t, err, &uk)
	assert.Equal(t, k2k.UnknownKernelError{Kernel: "gone", Role: "destination"}, *uk)

	_, err = r.Send(ctx, "kgpu0", "kgpu5", nil)
	assert.EqualError(t, err, `k2k: destination kernel "kgpu5" is on gpu5, which the router does not hold (it holds [gpu0 gpu1])`)
	assert.Zero(t, r.PendingTotal())
	assert.Zero(t, r.Traffic().Sent)

	_, err = k2k.New(nil, devs)
	assert.Error(t, err)
	_, err = k2k.New(c, nil)
	assert.Error(t, err)
	_, err = k2k.New(c, []gpu.Device{devs[0], devs[0]})
	assert.EqualError(t, err, "k2k: new router: device gpu0 listed twice")
	_, err = k2k.New(c, devs, k2k.WithAllocator(nil))
	assert.Error(t, err)
	assert.Error(t, r.Handle("", nil))
}

func TestPendingAndFIFOPerPair(t *testing.T) {
	topo := embedded(t, "dgx1-v100")
	devs := append(simGPUs(t, topo)[:3], cpuDevice(t))
	_, r := routed(t, topo, devs)
	ctx := context.Background()
	g := topology.GPU
	in := map[string]*inbox{}
	for _, d := range devs {
		in[kernelOn(d.ID())] = &inbox{}
		require.NoError(t, r.Handle(kernelOn(d.ID()), in[kernelOn(d.ID())].handler))
	}
	send := func(from, to topology.DeviceID, seed int) uint64 {
		m, err := r.Send(ctx, kernelOn(from), kernelOn(to), payload(seed, 64+seed))
		require.NoError(t, err)
		return m.ID
	}
	var want01 []uint64
	for i := range 5 {
		want01 = append(want01, send(g(0), g(1), i))
	}
	a := send(g(1), g(0), 10)
	b := send(topology.CPU, g(2), 11)
	c2 := send(g(2), g(2), 12)
	assert.Equal(t, 5, r.Pending(g(0), g(1)))
	assert.Equal(t, 1, r.Pending(g(1), g(0)), "pairs are ordered")
	assert.Equal(t, 1, r.Pending(topology.CPU, g(2)))
	assert.Equal(t, 1, r.Pending(g(2), g(2)))
	assert.Zero(t, r.Pending(g(0), g(2)))
	assert.Equal(t, 8, r.PendingTotal())
	assert.Equal(t, []k2k.DevicePair{{topology.CPU, g(2)}, {g(0), g(1)}, {g(1), g(0)}, {g(2), g(2)}}, r.Pairs())

	out, err := r.Drain(ctx, g(0), g(1))
	require.NoError(t, err)
	require.Len(t, out, 5)
	for i, o := range out {
		require.NoError(t, o.Err)
		assert.Equal(t, want01[i], o.Message.ID, "FIFO per pair")
		assert.Positive(t, o.Latency)
	}
	assert.Equal(t, want01, in["kgpu1"].ids)
	for i, got := range in["kgpu1"].data {
		assert.Equal(t, payload(i, 64+i), got)
	}
	assert.Zero(t, r.Pending(g(0), g(1)))
	assert.Equal(t, 3, r.PendingTotal())

	out, err = r.DrainAll(ctx)
	require.NoError(t, err)
	var ids []uint64
	for _, o := range out {
		require.NoError(t, o.Err)
		ids = append(ids, o.Message.ID)
	}
	assert.Equal(t, []uint64{b, a, c2}, ids, "DrainAll goes pair by pair in Pairs order")
	assert.Equal(t, [][]byte{payload(10, 74)}, in["kgpu0"].data)
	assert.Equal(t, [][]byte{payload(11, 75), payload(12, 76)}, in["kgpu2"].data)
	assert.Zero(t, r.PendingTotal())
	assert.Empty(t, r.Pairs())
	out, err = r.Drain(ctx, g(0), g(1))
	require.NoError(t, err)
	assert.Empty(t, out, "an empty pair drains nothing")
}

func TestDeliveryFailuresRecorded(t *testing.T) {
	topo := embedded(t, "dgx1-v100")
	devs := simGPUs(t, topo)[:4]
	c := coordinator(t, topo, devs)
	require.NoError(t, c.Assign("moving", topology.GPU(3)))
	require.NoError(t, c.Assign("silent", topology.GPU(3)))
	require.NoError(t, c.Assign("broken", topology.GPU(3)))
	require.NoError(t, c.Assign("panicky", topology.GPU(3)))
	r := newRouter(t, c, devs)
	ctx := context.Background()
	var in inbox
	boom := errors.New("boom")
	for _, k := range []string{"kgpu1", "kgpu2", "kgpu3", "moving"} {
		require.NoError(t, r.Handle(k, in.handler))
	}
	require.NoError(t, r.Handle("broken", func(context.Context, *k2k.Delivery) error { return boom }))
	require.NoError(t, r.Handle("panicky", func(context.Context, *k2k.Delivery) error { panic("oops") }))
	for _, k := range []string{"kgpu1", "kgpu2", "kgpu3", "moving", "silent", "broken", "panicky"} {
		_, err := r.Send(ctx, "kgpu0", k, payload(1, 100))
		require.NoError(t, err, k)
	}
	assert.True(t, c.Remove("kgpu1"))       // the kernel is unregistered
	_, err := c.Unregister(topology.GPU(2)) // its device is removed (kgpu2 migrates)
	require.NoError(t, err)
	require.NoError(t, c.Assign("moving", topology.GPU(1))) // moved, device still there

	var outs []k2k.Outcome
	for _, to := range []int{1, 2, 3} {
		o, err := r.Drain(ctx, topology.GPU(0), topology.GPU(to))
		require.NoError(t, err)
		outs = append(outs, o...)
	}
	require.Len(t, outs, 7)
	assert.ErrorIs(t, outs[0].Err, k2k.ErrKernelGone)
	assert.ErrorIs(t, outs[1].Err, k2k.ErrDeviceRemoved)
	assert.NoError(t, outs[2].Err, "kgpu3 is delivered")
	assert.ErrorIs(t, outs[3].Err, k2k.ErrKernelMoved)
	assert.ErrorIs(t, outs[4].Err, k2k.ErrNoHandler)
	assert.ErrorIs(t, outs[5].Err, boom)
	assert.ErrorContains(t, outs[6].Err, `k2k: handler of "panicky" panicked: oops`)
	assert.EqualError(t, outs[1].Err, `k2k: message 2 kgpu0→kgpu2: k2k: destination device removed: gpu2 (kernel "kgpu2")`)
	for _, o := range outs {
		if o.Err != nil {
			assert.Zero(t, o.Latency)
		}
	}
	assert.Equal(t, [][]byte{payload(1, 100)}, in.data)

	fs := r.Failures()
	require.Len(t, fs, 6)
	var failed []string
	for _, f := range fs {
		failed = append(failed, f.Message.Dest)
	}
	assert.Equal(t, []string{"kgpu1", "kgpu2", "moving", "silent", "broken", "panicky"}, failed)
	s := r.Traffic()
	assert.Equal(t, uint64(7), s.Sent)
	assert.Equal(t, uint64(1), s.Delivered)
	assert.Equal(t, uint64(6), s.Failed)
	assert.Equal(t, int64(100), s.Bytes)
	assert.Zero(t, s.Pending)
}

func TestStatsPerRoute(t *testing.T) {
	topo := embedded(t, "dgx1-v100")
	devs := append(simGPUs(t, topo), cpuDevice(t))
	_, r := routed(t, topo, devs)
	ctx := context.Background()
	g := topology.GPU
	var in inbox
	for _, d := range devs {
		require.NoError(t, r.Handle(kernelOn(d.ID()), in.handler))
	}
	sends := []struct {
		from, to topology.DeviceID
		n        int
	}{
		{g(0), g(0), 10}, {g(0), g(3), 100}, {g(0), g(3), 200}, {g(0), g(5), 1000},
		{topology.CPU, g(4), 7}, {g(4), topology.CPU, 9},
	}
	for i, s := range sends {
		_, err := r.Send(ctx, kernelOn(s.from), kernelOn(s.to), payload(i, s.n))
		require.NoError(t, err)
	}
	assert.Zero(t, r.Traffic().Delivered)
	out, err := r.DrainAll(ctx)
	require.NoError(t, err)
	require.Len(t, out, len(sends))
	sum := map[topology.RouteKind]int64{}
	for _, o := range out {
		require.NoError(t, o.Err)
		sum[o.Message.Route] += int64(o.Latency)
	}
	s := r.Traffic()
	assert.Equal(t, uint64(6), s.Sent)
	assert.Equal(t, uint64(6), s.Delivered)
	assert.Equal(t, int64(1326), s.Bytes)
	want := map[topology.RouteKind][2]int64{ // messages, bytes
		topology.RouteSame:   {1, 10},
		topology.RouteDirect: {4, 316},
		topology.RouteViaGPU: {1, 1000},
	}
	require.Len(t, s.ByRoute, len(want))
	for kind, w := range want {
		rs := s.ByRoute[kind]
		assert.Equal(t, uint64(w[0]), rs.Messages, kind.String())
		assert.Equal(t, w[1], rs.Bytes, kind.String())
		assert.Positive(t, rs.AvgLatency(), kind.String())
		assert.Equal(t, sum[kind], int64(rs.TotalLatency), "the total is the outcomes' latencies")
		assert.Equal(t, rs.TotalLatency/time.Duration(rs.Messages), rs.AvgLatency())
	}
	assert.Zero(t, k2k.RouteStats{}.AvgLatency())
}

// routed returns a Coordinator over topo and devs (coordinator) and a
// Router over both (newRouter).
func routed(t *testing.T, topo *topology.Topology, devs []gpu.Device) (*placement.Coordinator, *k2k.Router) {
	t.Helper()
	c := coordinator(t, topo, devs)
	return c, newRouter(t, c, devs)
}
