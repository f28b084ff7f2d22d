package nvml_test

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/streamdag/streamdag/gpu/nvml"
)

// Discover with go-nvml's DGX A100 mock in place of the host's NVML.
func ExampleDiscover() {
	inv, err := nvml.Discover(context.Background(), nvml.WithLibrary(dgxa100.New()))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(inv.NVML)
	for _, d := range inv.GPUs()[:2] {
		fmt.Printf("%v: %s, %d GiB, compute capability %v\n", d.ID, d.Name, d.MemoryBytes>>30, d.ComputeCapability)
	}
	fmt.Println(len(inv.GPUs()), "GPUs")
	// Output:
	// NVML available (driver 550.54.15)
	// gpu0: Mock NVIDIA A100-SXM4-40GB, 40 GiB, compute capability 8.0
	// gpu1: Mock NVIDIA A100-SXM4-40GB, 40 GiB, compute capability 8.0
	// 8 GPUs
}
