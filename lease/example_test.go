package lease_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/streamdag/streamdag/lease"
	"github.com/streamdag/streamdag/topology"
)

// A pool of two GPUs (sparse indices): claims are served in slot order,
// TryClaim fails while every GPU is leased, and a released claim frees
// its slot.
func ExamplePool() {
	a100 := func(i int) topology.DeviceFacts {
		return topology.DeviceFacts{ID: topology.GPU(i), Name: "A100", NUMANode: -1}
	}
	p, err := lease.NewPool([]topology.DeviceFacts{topology.CPUDevice(), a100(0), a100(2)})
	if err != nil {
		fmt.Println(err)
		return
	}
	first, err := p.Claim(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	second, ok := p.TryClaim()
	fmt.Println(p.Capacity(), first.Device().ID, first.Slot(), second.Device().ID, ok)
	_, ok = p.TryClaim()
	fmt.Println("third:", ok)
	first.Release()
	for _, s := range p.SnapshotLeases() {
		fmt.Println(s.Slot, s.Device, s.Leased)
	}
	second.Release()
	// Output:
	// 2 gpu0 0 gpu2 true
	// third: false
	// 0 gpu0 false
	// 1 gpu2 true
}

// The backend's lifecycle: a claim holds a GPU permit; Close signals
// close once (nil), later calls say it is already closing, new claims are
// refused, and CloseAndWait returns when the cleanup is done.
func ExampleBackend() {
	ctx := context.Background()
	b, err := lease.New(
		lease.WithDevices([]topology.DeviceFacts{{ID: topology.GPU(0), Name: "A100", NUMANode: -1}}),
		lease.WithDrivers(), // lease the GPUs of WithDevices only
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := b.Claim(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	m := b.MetricsSnapshot()
	fmt.Println(c.Device().ID, m.Admissions, m.Close.ActiveGPUPermits)
	c.Release()
	fmt.Println(b.Close())
	fmt.Println(errors.Is(b.Close(), lease.ErrBackendClosing))
	_, err = b.Claim(ctx)
	fmt.Println(err)
	s, err := b.CloseAndWait(ctx)
	fmt.Println(s.Phase, err)
	// Output:
	// gpu0 1 1
	// <nil>
	// true
	// lease: backend_closing: the backend is closing
	// done <nil>
}
