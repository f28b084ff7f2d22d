package k2k_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/placement"
	"github.com/streamdag/streamdag/topology"
)

// machine loads a machine description (JSON) from the shared topologies;
// it skips when the file is missing (fails under CI).
func machine(t *testing.T, name string) *topology.Topology {
	t.Helper()
	b, err := os.ReadFile(testdata.TopologyFile(t, name))
	require.NoError(t, err)
	m, err := topology.ParseMachine(b)
	require.NoError(t, err)
	var opts []topology.Option
	if m.SpecFound {
		opts = append(opts, topology.WithGPUSpec(m.Spec))
	}
	topo, err := topology.New(m.Facts, opts...)
	require.NoError(t, err)
	return topo
}

// embedded returns the topology of the embedded machine name (as
// topology.LoadMachine reads it), for tests that need a real machine
// but not the shared files.
func embedded(t *testing.T, name string) *topology.Topology {
	t.Helper()
	m, err := topology.LoadMachine(name)
	require.NoError(t, err)
	topo, err := topology.New(m.Facts, topology.WithGPUSpec(m.Spec))
	require.NoError(t, err)
	return topo
}

// simGPUs opens one simulated GPU per GPU of topo, closed at cleanup.
func simGPUs(t *testing.T, topo *topology.Topology) []gpu.Device {
	t.Helper()
	set, err := sim.New(topo.GPUs())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	return set.Devices()
}

// cpuDevice opens the CPU device with one stream, closed at cleanup.
func cpuDevice(t *testing.T) gpu.Device {
	t.Helper()
	d, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

// openCLDevices opens n OpenCL devices (opencl0, …), each its own
// context on the machine's first OpenCL device, closed at cleanup; it
// skips when there is none (fails under CI).
func openCLDevices(t *testing.T, n int) []gpu.Device {
	t.Helper()
	if os.Getenv("POCL_CACHE_DIR") == "" {
		t.Setenv("POCL_CACHE_DIR", filepath.Join(os.TempDir(), "streamdag-pocl-cache"))
	}
	ds, err := opencl.Devices()
	if err == nil && len(ds) == 0 {
		err = errors.New("no OpenCL device on any platform")
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("OpenCL needed under CI: %v", err)
		}
		t.Skipf("no OpenCL here: %v", err)
	}
	var out []gpu.Device
	for i := range n {
		d, err := opencl.NewDevice(ds[0], opencl.WithIndex(i))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, d.Close()) })
		out = append(out, d)
	}
	return out
}

// coordinator registers devs with a Coordinator over topo (nil: none)
// and assigns kernel "k<device>" (e.g. "kgpu0", kernelOn) to each.
func coordinator(t *testing.T, topo *topology.Topology, devs []gpu.Device) *placement.Coordinator {
	t.Helper()
	var opts []placement.Option
	if topo != nil {
		opts = append(opts, placement.WithTopology(topo))
	}
	c, err := placement.NewCoordinator(opts...)
	require.NoError(t, err)
	for _, d := range devs {
		c.Register(placement.DeviceInfo{ID: d.ID(), Name: d.Info().Name})
		require.NoError(t, c.Assign(kernelOn(d.ID()), d.ID()))
	}
	return c
}

func kernelOn(id topology.DeviceID) string { return fmt.Sprint("k", id) }

// payload returns n bytes that differ from those of other seeds.
func payload(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seed*31 + i*7)
	}
	return b
}
