package k2k_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/internal/faultdev"
	"github.com/streamdag/streamdag/k2k"
	"github.com/streamdag/streamdag/topology"
)

// TestOpenCLToOpenCLViaHost moves payloads between two OpenCL contexts:
// out of opencl0's memory into host memory and into opencl1's memory,
// where the handler finds them and reads them back.
func TestOpenCLToOpenCLViaHost(t *testing.T) {
	devs := append(openCLDevices(t, 2), cpuDevice(t))
	_, r := routed(t, nil, devs)
	ctx := context.Background()
	o0, o1 := topology.OpenCL(0), topology.OpenCL(1)
	kind, path := r.Route(4096, o0, o1)
	assert.Equal(t, topology.RouteViaHost, kind, "no P2P between OpenCL contexts")
	assert.Equal(t, []topology.DeviceID{o0, topology.CPU, o1}, path)

	var (
		mu   sync.Mutex
		got  [][]byte
		mems []int64
	)
	require.NoError(t, r.Handle("kopencl1", func(ctx context.Context, d *k2k.Delivery) error {
		m := d.Memory()
		require.NotNil(t, m, "the payload is in opencl1's memory")
		assert.Equal(t, o1, m.Device())
		assert.Nil(t, d.HostBytes())
		b, err := d.ReadBack(ctx)
		mu.Lock()
		got, mems = append(got, b), append(mems, m.Bytes())
		mu.Unlock()
		return err
	}))
	sizes := []int{4096, 1, 0, 100003}
	for i, n := range sizes {
		m, err := r.Send(ctx, "kopencl0", "kopencl1", payload(i, n))
		require.NoError(t, err)
		assert.Equal(t, topology.RouteViaHost, m.Route)
		assert.Equal(t, int64(n), m.Bytes)
	}
	// And opencl1 → cpu (one hop over the host link) → back to opencl0.
	require.NoError(t, r.Handle("kcpu", func(ctx context.Context, d *k2k.Delivery) error {
		assert.Nil(t, d.Memory())
		_, err := r.Send(ctx, "kcpu", "kopencl0", d.HostBytes())
		return err
	}))
	var back []byte
	require.NoError(t, r.Handle("kopencl0", func(ctx context.Context, d *k2k.Delivery) error {
		var err error
		back, err = d.ReadBack(ctx)
		return err
	}))
	_, err := r.Send(ctx, "kopencl1", "kcpu", payload(9, 333))
	require.NoError(t, err)

	out, err := r.Drain(ctx, o0, o1)
	require.NoError(t, err)
	require.Len(t, out, len(sizes))
	for i, n := range sizes {
		require.NoError(t, out[i].Err)
		assert.Equal(t, payload(i, n), got[i], "bytes read back equal")
		assert.Equal(t, int64(n), mems[i])
	}
	out, err = r.Drain(ctx, o1, topology.CPU)
	require.NoError(t, err)
	require.Len(t, out, 1)
	require.NoError(t, out[0].Err)
	assert.Equal(t, topology.RouteDirect, out[0].Message.Route)
	out, err = r.Drain(ctx, topology.CPU, o0)
	require.NoError(t, err)
	require.Len(t, out, 1)
	require.NoError(t, out[0].Err)
	assert.Equal(t, payload(9, 333), back)
	s := r.Traffic()
	assert.Equal(t, uint64(len(sizes)), s.ByRoute[topology.RouteViaHost].Messages)
	assert.Equal(t, int64(4096+1+100003), s.ByRoute[topology.RouteViaHost].Bytes)
	assert.Equal(t, int64(666), s.ByRoute[topology.RouteDirect].Bytes)
}

// TestOpenCLAndSimViaHost: between an OpenCL device and a simulated GPU
// the payload goes through host memory, both ways.
func TestOpenCLAndSimViaHost(t *testing.T) {
	topo := embedded(t, "rtx5090-2gpu-no-p2p")
	devs := append(openCLDevices(t, 1), simGPUs(t, topo)...)
	_, r := routed(t, topo, devs)
	ctx := context.Background()
	var in inbox
	require.NoError(t, r.Handle("kgpu1", in.handler))
	require.NoError(t, r.Handle("kopencl0", in.handler))
	m, err := r.Send(ctx, "kopencl0", "kgpu1", payload(1, 5000))
	require.NoError(t, err)
	assert.Equal(t, []topology.DeviceID{topology.OpenCL(0), topology.CPU, topology.GPU(1)}, m.Path)
	_, err = r.Send(ctx, "kgpu1", "kopencl0", payload(2, 6000))
	require.NoError(t, err)
	out, err := r.DrainAll(ctx)
	require.NoError(t, err)
	require.Len(t, out, 2)
	for _, o := range out {
		require.NoError(t, o.Err)
		assert.Equal(t, topology.RouteViaHost, o.Message.Route)
	}
	// Pairs order: gpu1→opencl0 first (gpu before opencl).
	assert.Equal(t, [][]byte{payload(2, 6000), payload(1, 5000)}, in.data)
	assert.Equal(t, []topology.DeviceID{topology.OpenCL(0), topology.GPU(1)}, in.on)
}

// TestCPUAndSim moves payloads between the CPU device and simulated GPUs:
// direct over the host link, peer to peer, and through an intermediate GPU.
func TestCPUAndSim(t *testing.T) {
	topo := embedded(t, "dgx1-v100")
	devs := append([]gpu.Device{cpuDevice(t)}, simGPUs(t, topo)...)
	_, r := routed(t, topo, devs)
	ctx := context.Background()
	got := map[string][]byte{}
	var mu sync.Mutex
	for _, d := range devs {
		k := kernelOn(d.ID())
		require.NoError(t, r.Handle(k, func(_ context.Context, d *k2k.Delivery) error {
			require.Nil(t, d.Memory())
			mu.Lock()
			got[k] = append([]byte(nil), d.HostBytes()...)
			mu.Unlock()
			return nil
		}))
	}
	hops := [][2]string{{"kcpu", "kgpu0"}, {"kgpu0", "kcpu"}, {"kgpu0", "kgpu3"}, {"kgpu3", "kgpu6"}}
	for i, h := range hops {
		_, err := r.Send(ctx, h[0], h[1], payload(i, 1000+i))
		require.NoError(t, err)
	}
	out, err := r.DrainAll(ctx)
	require.NoError(t, err)
	kinds := map[string]topology.RouteKind{}
	for _, o := range out {
		require.NoError(t, o.Err)
		kinds[o.Message.Source+"→"+o.Message.Dest] = o.Message.Route
	}
	assert.Equal(t, map[string]topology.RouteKind{"kcpu→kgpu0": topology.RouteDirect, "kgpu0→kcpu": topology.RouteDirect,
		"kgpu0→kgpu3": topology.RouteDirect, "kgpu3→kgpu6": topology.RouteViaGPU}, kinds)
	assert.Equal(t, payload(0, 1000), got["kgpu0"])
	assert.Equal(t, payload(1, 1001), got["kcpu"])
	assert.Equal(t, payload(2, 1002), got["kgpu3"])
	assert.Equal(t, payload(3, 1003), got["kgpu6"])
}

// TestConcurrentSendAndDrain: many goroutines send while others drain;
// every message is delivered once, each sender's in its order.
func TestConcurrentSendAndDrain(t *testing.T) {
	topo := embedded(t, "dgx1-v100")
	devs := simGPUs(t, topo)[:4]
	_, r := routed(t, topo, devs)
	ctx := context.Background()
	var (
		mu   sync.Mutex
		seen = map[string][]int{} // per pair and sender: the numbers delivered
	)
	for _, d := range devs {
		require.NoError(t, r.Handle(kernelOn(d.ID()), func(_ context.Context, d *k2k.Delivery) error {
			b := d.HostBytes()
			mu.Lock()
			defer mu.Unlock()
			key := fmt.Sprintf("%s→%s sender %d", d.Message.Source, d.Message.Dest, b[2])
			seen[key] = append(seen[key], int(b[0])|int(b[1])<<8)
			return nil
		}))
	}
	const senders, each = 8, 40
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var drained sync.WaitGroup
	for range 2 {
		drained.Add(1)
		go func() {
			defer drained.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := r.DrainAll(ctx)
				assert.NoError(t, err)
			}
		}()
	}
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := kernelOn(topology.GPU(s % 4))
			dst := kernelOn(topology.GPU((s + 1) % 4))
			for i := range each {
				_, err := r.Send(ctx, src, dst, []byte{byte(i), byte(i >> 8), byte(s)})
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	drained.Wait()
	_, err := r.DrainAll(ctx)
	require.NoError(t, err)
	s := r.Traffic()
	assert.Equal(t, uint64(senders*each), s.Sent)
	assert.Equal(t, uint64(senders*each), s.Delivered)
	assert.Equal(t, int64(3*senders*each), s.Bytes)
	assert.Zero(t, s.Pending)
	// Two senders share each pair: their messages interleave, but each
	// sender's arrive in the order it sent them, each once.
	want := make([]int, each)
	for i := range want {
		want[i] = i
	}
	for key, nums := range seen {
		assert.Equal(t, want, nums, key)
	}
	assert.Len(t, seen, senders)
}

func TestDrainCancelledKeepsMessages(t *testing.T) {
	topo := embedded(t, "dgx1-v100")
	devs := simGPUs(t, topo)[:2]
	_, r := routed(t, topo, devs)
	var in inbox
	require.NoError(t, r.Handle("kgpu1", in.handler))
	var ids []uint64
	for i := range 3 {
		m, err := r.Send(context.Background(), "kgpu0", "kgpu1", payload(i, 10))
		require.NoError(t, err)
		ids = append(ids, m.ID)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out, err := r.Drain(ctx, topology.GPU(0), topology.GPU(1))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, out)
	assert.Equal(t, 3, r.Pending(topology.GPU(0), topology.GPU(1)), "put back")
	out, err = r.Drain(context.Background(), topology.GPU(0), topology.GPU(1))
	require.NoError(t, err)
	assert.Len(t, out, 3)
	assert.Equal(t, ids, in.ids, "still in order")
}

func TestCloseReleasesQueued(t *testing.T) {
	topo := embedded(t, "dgx1-v100")
	devs := append(simGPUs(t, topo)[:2], openCLDevices(t, 1)...)
	_, r := routed(t, topo, devs)
	ctx := context.Background()
	for i := range 4 {
		_, err := r.Send(ctx, "kgpu0", "kgpu1", payload(i, 1<<12))
		require.NoError(t, err)
		_, err = r.Send(ctx, "kopencl0", "kgpu1", payload(i, 1<<12))
		require.NoError(t, err)
	}
	require.NoError(t, r.Close())
	s := r.Traffic()
	assert.Equal(t, uint64(8), s.Dropped)
	assert.Zero(t, s.Pending)
	assert.Zero(t, r.PendingTotal())
	_, err := r.Send(ctx, "kgpu0", "kgpu1", nil)
	assert.ErrorIs(t, err, k2k.ErrClosed)
	_, err = r.Drain(ctx, topology.GPU(0), topology.GPU(1))
	assert.ErrorIs(t, err, k2k.ErrClosed)
	_, err = r.DrainAll(ctx)
	assert.ErrorIs(t, err, k2k.ErrClosed)
	assert.ErrorIs(t, r.Handle("kgpu1", nil), k2k.ErrClosed)
	assert.NoError(t, r.Close(), "idempotent")
	// The checked allocator (newRouter) asserts no host byte is left.
}

// TestDeviceLossFailsDelivery: a destination device lost during the copy
// fails the delivery, which is recorded with the loss; a lost source
// device fails Send; nothing stays allocated.
func TestDeviceLossFailsDelivery(t *testing.T) {
	cls := openCLDevices(t, 2)
	lost := faultdev.New(cls[1].(gpu.CodeDevice), 0, 0)
	devs := []gpu.Device{cls[0], lost, cpuDevice(t)}
	_, r := routed(t, nil, devs)
	ctx := context.Background()
	var in inbox
	require.NoError(t, r.Handle("kopencl1", in.handler))
	_, err := r.Send(ctx, "kopencl0", "kopencl1", payload(1, 256))
	require.NoError(t, err)
	out, err := r.Drain(ctx, topology.OpenCL(0), topology.OpenCL(1))
	require.NoError(t, err)
	require.Len(t, out, 1)
	assert.ErrorIs(t, out[0].Err, gpu.ErrDeviceLost)
	assert.ErrorContains(t, out[0].Err, "k2k: message 1 kopencl0→kopencl1: k2k: copy 256 bytes host memory→opencl1")
	assert.Empty(t, in.data)
	require.Len(t, r.Failures(), 1)
	assert.Equal(t, uint64(1), r.Traffic().Failed)

	_, err = r.Send(ctx, "kopencl1", "kcpu", payload(2, 16))
	assert.ErrorIs(t, err, gpu.ErrDeviceLost, "the payload cannot be placed on a lost device")
	assert.ErrorContains(t, err, "k2k: send kopencl1→kcpu: k2k: copy 16 bytes host memory→opencl1")
	assert.Zero(t, r.PendingTotal())
}

// TestCloseDuringSends: Close while goroutines send; every Send either
// queued its message (then dropped by Close) or got ErrClosed, and no
// byte stays allocated.
func TestCloseDuringSends(t *testing.T) {
	topo := embedded(t, "dgx1-v100")
	devs := append(simGPUs(t, topo)[:2], cpuDevice(t))
	_, r := routed(t, topo, devs)
	ctx := context.Background()
	const senders = 6
	var (
		wg     sync.WaitGroup
		queued [senders]uint64
		first  = make(chan struct{}, senders)
	)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				_, err := r.Send(ctx, "kcpu", kernelOn(topology.GPU(s%2)), payload(i, 512))
				if err != nil {
					assert.ErrorIs(t, err, k2k.ErrClosed)
					return
				}
				if queued[s]++; queued[s] == 1 {
					first <- struct{}{}
				}
			}
		}()
	}
	for range senders {
		<-first
	}
	require.NoError(t, r.Close())
	wg.Wait()
	var sum uint64
	for _, n := range queued {
		sum += n
	}
	s := r.Traffic()
	assert.Equal(t, sum, s.Sent)
	assert.Equal(t, sum, s.Dropped)
	assert.Zero(t, s.Pending)
}
