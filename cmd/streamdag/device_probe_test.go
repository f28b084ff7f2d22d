package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
)

// probeKind is the kind of probeCounter in the registry.
const probeKind = "test-probe-counting"

// probeCounter is an enumerating driver that finds no device and counts
// the times a backend asks it (Enumerate), so a test sees which runs ask
// a driver for devices at all.
type probeCounter struct{ asked atomic.Int64 }

var probes = &probeCounter{}

func init() { gpu.Register(probeKind, probes) }

func (*probeCounter) Open(context.Context, gpu.Config) (gpu.Set, error) {
	return nil, errors.New("test-probe-counting: no device")
}

func (p *probeCounter) Enumerate(context.Context) ([]gpu.Found, error) {
	p.asked.Add(1)
	return nil, nil
}

func (*probeCounter) OpenDevice(_ context.Context, f gpu.Found, _ gpu.Config) (gpu.Device, error) {
	return nil, errors.New("test-probe-counting: no device " + f.Key)
}

// withGPUNodes points gpuDeviceNodes at a fresh directory holding the
// files nodes (none: a host with no GPU device node) for the rest of the
// test, and returns the patterns.
func withGPUNodes(t *testing.T, nodes ...string) []string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range nodes {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), nil, 0o600))
	}
	old := gpuDeviceNodes
	gpuDeviceNodes = []string{filepath.Join(dir, "nvidia[0-9]*"), filepath.Join(dir, "renderD*"), filepath.Join(dir, "kfd")}
	t.Cleanup(func() { gpuDeviceNodes = old })
	return gpuDeviceNodes
}

// TestGPUDeviceNode: gpuDeviceNode finds a node of any of the patterns,
// in the patterns' order, and none where only other nodes are.
func TestGPUDeviceNode(t *testing.T) {
	tests := []struct {
		name  string
		nodes []string
		want  string // the base name found; "" for none
	}{
		{name: "none", want: ""},
		{name: "only nvidiactl and nvidia-uvm", nodes: []string{"nvidiactl", "nvidia-uvm"}, want: ""},
		{name: "an NVIDIA GPU", nodes: []string{"nvidiactl", "nvidia0"}, want: "nvidia0"},
		{name: "a DRM render node", nodes: []string{"renderD128"}, want: "renderD128"},
		{name: "ROCm", nodes: []string{"kfd"}, want: "kfd"},
		{name: "the first pattern first", nodes: []string{"kfd", "renderD129", "nvidia3"}, want: "nvidia3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pats := withGPUNodes(t, tc.nodes...)
			got := gpuDeviceNode()
			if tc.want == "" {
				assert.Empty(t, got)
				return
			}
			assert.Equal(t, filepath.Join(filepath.Dir(pats[0]), tc.want), got)
		})
	}
}

// TestPlanLease: which drivers each --device asks for devices. cpu and
// --topology ask none (an empty, non-nil Drivers, so the backend does not
// fall back to every registered enumerator); auto asks the OpenCL driver
// only where a GPU device node exists, and says why not otherwise.
func TestPlanLease(t *testing.T) {
	tests := []struct {
		name      string
		flag      string
		sim       bool
		nodes     []string
		drivers   []string
		notProbed bool
	}{
		{name: "cpu", flag: deviceCPU, nodes: []string{"renderD128"}, drivers: []string{}},
		{name: "topology", flag: deviceAuto, sim: true, nodes: []string{"renderD128"}, drivers: []string{}},
		{name: "opencl with no node", flag: deviceOpenCL, drivers: []string{openCLDriver}},
		{name: "auto with a node", flag: deviceAuto, nodes: []string{"nvidia0"}, drivers: []string{openCLDriver}},
		{name: "auto with no node", flag: deviceAuto, drivers: []string{}, notProbed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pats := withGPUNodes(t, tc.nodes...)
			lp := planLease(tc.flag, tc.sim)
			assert.Equal(t, tc.flag, lp.flag)
			require.NotNil(t, lp.drivers, "no lease.WithDrivers asks every registered enumerator")
			assert.Equal(t, tc.drivers, lp.drivers)
			if tc.notProbed {
				assert.Equal(t, "no GPU device node ("+pats[0]+", "+pats[1]+", "+pats[2]+")", lp.notProbed)
			} else {
				assert.Empty(t, lp.notProbed)
			}
		})
	}
}

// TestRunFlightsAsksNoDriverNeedlessly: a whole run flights asks no
// driver for devices with --device cpu, with --topology, and with
// --device auto on a host with no GPU device node (the devices line then
// says OpenCL was not probed); with a GPU device node, auto asks the
// OpenCL driver once, as --device opencl does (the counting driver
// stands in for gpu/opencl's).
func TestRunFlightsAsksNoDriverNeedlessly(t *testing.T) {
	old := openCLDriver
	openCLDriver = probeKind
	t.Cleanup(func() { openCLDriver = old })
	tests := []struct {
		name  string
		args  []string
		nodes []string
		code  int
		asked int64
		why   string // in stderr
		// notProbed: stderr has the devices line of auto with no node.
		notProbed bool
	}{
		{name: "cpu", args: []string{"--device", "cpu"}, nodes: []string{"renderD128"},
			why: "devices: cpu; --device cpu\n"},
		{name: "topology", args: []string{"--topology", "sim:dgx1-v100"}, nodes: []string{"renderD128"},
			why: "simulated"},
		{name: "auto with no node", args: []string{"--device", "auto"}, notProbed: true},
		{name: "default with no node", notProbed: true},
		{name: "auto with a node", args: []string{"--device", "auto"}, nodes: []string{"renderD128"}, asked: 1,
			why: "--device auto: no OpenCL GPU (no GPU: "},
		{name: "opencl", args: []string{"--device", "opencl"}, code: 1, asked: 1,
			why: "--device opencl: no OpenCL device: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pats := withGPUNodes(t, tc.nodes...)
			before := probes.asked.Load()
			code, _, errs := runArgs(t, append([]string{"run", "flights", "--top", "1"}, tc.args...)...)
			require.Equal(t, tc.code, code, errs)
			assert.Equal(t, tc.asked, probes.asked.Load()-before, "Enumerate calls")
			why := tc.why
			if tc.notProbed {
				why = "devices: cpu; --device auto: no GPU device node (" + pats[0] + ", " + pats[1] + ", " + pats[2] +
					"): OpenCL not probed; running on the CPU device\n"
			}
			assert.Contains(t, errs, why)
		})
	}
}
