package k2k_test

import (
	"context"
	"fmt"

	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/k2k"
	"github.com/streamdag/streamdag/placement"
	"github.com/streamdag/streamdag/topology"
)

// A producer on gpu0 of a DGX-1 (simulated GPUs) sends to a consumer on
// gpu5, which gpu0 reaches only over SYS: the message goes peer to peer
// through gpu1 (NVLink both ways), cheaper than through host memory.
func ExampleRouter() {
	m, err := topology.LoadMachine("dgx1-v100")
	if err != nil {
		fmt.Println(err)
		return
	}
	topo, err := topology.New(m.Facts, topology.WithGPUSpec(m.Spec))
	if err != nil {
		fmt.Println(err)
		return
	}
	gpus, err := sim.New(topo.GPUs())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer gpus.Close()
	coord, err := placement.NewCoordinator(placement.WithTopology(topo))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range gpus.Devices() {
		coord.Register(placement.DeviceInfo{ID: d.ID(), Name: d.Info().Name})
	}
	_ = coord.Assign("producer", topology.GPU(0))
	_ = coord.Assign("consumer", topology.GPU(5))

	r, err := k2k.New(coord, gpus.Devices())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	_ = r.Handle("consumer", func(ctx context.Context, d *k2k.Delivery) error {
		fmt.Printf("consumer on %s got %q\n", d.Message.To, d.HostBytes())
		return nil
	})
	ctx := context.Background()
	msg, err := r.Send(ctx, "producer", "consumer", []byte("hello"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(msg.Route, msg.Path, r.Pending(topology.GPU(0), topology.GPU(5)))
	out, err := r.Drain(ctx, topology.GPU(0), topology.GPU(5))
	if err != nil {
		fmt.Println(err)
		return
	}
	s := r.Traffic()
	fmt.Println(len(out), out[0].Err, s.Delivered, s.ByRoute[topology.RouteViaGPU].Bytes)
	// Output:
	// via-gpu [gpu0 gpu1 gpu5] 1
	// consumer on gpu5 got "hello"
	// 1 <nil> 1 5
}
