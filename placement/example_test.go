package placement_test

import (
	"fmt"
	"time"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/placement"
	"github.com/streamdag/streamdag/topology"
)

// Two independent 1 ms kernels go to two devices; a third that reads both
// of their 1 KiB outputs goes to one of them.
func ExamplePlace() {
	g := dag.New()
	a, b := g.AddBuffer("a", 1<<10), g.AddBuffer("b", 1<<10)
	g.AddKernel("left", nop, dag.Writes(a), dag.Estimate(time.Millisecond))
	g.AddKernel("right", nop, dag.Writes(b), dag.Estimate(time.Millisecond))
	g.AddKernel("join", nop, dag.Reads(a), dag.Reads(b), dag.Estimate(time.Millisecond))
	if err := g.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	res, err := placement.Place(placement.Problem{Graph: g, Devices: []topology.DeviceID{topology.GPU(0), topology.GPU(1)}}, placement.HEFT)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Strategy, res.Device, res.Makespan)
	// Output: heft [0 1 0] 2ms
}

// A coordinator spreads new kernels over the least loaded devices and
// moves an unregistered device's kernels onto the others.
func ExampleCoordinator() {
	c, err := placement.NewCoordinator()
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range 3 {
		c.Register(placement.DeviceInfo{ID: topology.GPU(i), Name: fmt.Sprint("gpu", i)})
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		id, err := c.Select(placement.SelectRequest{})
		if err != nil {
			fmt.Println(err)
			return
		}
		_ = c.Assign(k, id)
		fmt.Println(k, "on", id)
	}
	res, _ := c.Unregister(topology.GPU(0))
	fmt.Println(res.Migrations)
	// Output:
	// a on gpu0
	// b on gpu1
	// c on gpu2
	// d on gpu0
	// [{a gpu0 gpu1} {d gpu0 gpu2}]
}
