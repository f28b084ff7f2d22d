package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu/nvml"
	"github.com/streamdag/streamdag/gpu/nvml/nvmlmock"
	"github.com/streamdag/streamdag/gpu/opencl"
)

type devicesJSON struct {
	NVML struct {
		Available bool   `json:"available"`
		Reason    string `json:"reason"`
		Driver    string `json:"driver"`
	} `json:"nvml"`
	Devices []map[string]any `json:"devices"`
	P2P     []map[string]any `json:"p2p"`
}

func TestDevicesHost(t *testing.T) {
	code, out, errs := runArgs(t, "devices")
	require.Equal(t, 0, code, errs)
	assert.True(t, strings.HasPrefix(out, "ID "), out)
	assert.Contains(t, out, "\ncpu ")
	assert.Contains(t, out, "\nNVML ")

	code, out, errs = runArgs(t, "devices", "--json")
	require.Equal(t, 0, code, errs)
	var j devicesJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	require.NotEmpty(t, j.Devices)
	assert.Equal(t, "cpu", j.Devices[0]["id"])
	keys := []string{}
	for k := range j.Devices[0] {
		keys = append(keys, k)
	}
	assert.ElementsMatch(t, []string{"id", "kind", "name", "uuid", "memory_bytes", "compute_capability", "pci_bus_id", "numa_node"}, keys)
	if !j.NVML.Available {
		// This machine has no GPU: CPU only, and why.
		assert.True(t, strings.HasPrefix(j.NVML.Reason, "nvml: Init: "), j.NVML.Reason)
		assert.Len(t, j.Devices, 1)
		assert.NotContains(t, out, `"p2p"`, "the p2p section appears only with GPUs")
	}
}

// mockDevices writes, as the devices command does, the inventory that
// nvml.Discover finds on go-nvml's mock server name (filled by nvmlmock).
func mockDevices(t *testing.T, name string, asJSON bool) string {
	t.Helper()
	srv, err := nvmlmock.New(name)
	require.NoError(t, err)
	inv, err := nvml.Discover(t.Context(), nvml.WithLibrary(srv))
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, writeDevices(&out, inv, asJSON))
	return out.String()
}

func TestDevicesNVMLMock(t *testing.T) {
	out := mockDevices(t, "dgxa100", false)
	assert.Equal(t, 8, strings.Count(out, "Mock NVIDIA A100-SXM4-40GB"), out)
	assert.Contains(t, out, "\nNVML available (driver 550.54.15)")
	assert.NotContains(t, out, "NVML: NVML")
	assert.Contains(t, out, "P2P matrix")
	assert.Contains(t, out, "\ngpu0  X        NV12 OK")
	assert.Equal(t, 56, strings.Count(out, "NV12 OK"))
	assert.NotContains(t, out, "note:", "the filled mock answers every call")

	var j devicesJSON
	require.NoError(t, json.Unmarshal([]byte(mockDevices(t, "dgxh100", true)), &j))
	assert.True(t, j.NVML.Available)
	require.Len(t, j.Devices, 9)
	assert.Equal(t, "gpu7", j.Devices[8]["id"])
	assert.Equal(t, "9.0", j.Devices[8]["compute_capability"])
	assert.Equal(t, "00000000:07:00.0", j.Devices[8]["pci_bus_id"])
	require.Len(t, j.P2P, 56)
	assert.Equal(t, map[string]any{"from": "gpu0", "to": "gpu1", "label": "NV18", "nvlinks": float64(18), "read": "OK",
		"write": "OK", "nvlink": "OK", "atomics": "OK", "ancestor": "NODE"}, j.P2P[0])
}

// The shipped command has no flag that swaps this host's NVML for a mock.
func TestDevicesHasNoMockFlag(t *testing.T) {
	code, out, _ := runArgs(t, "devices", "--help")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "--json")
	assert.NotContains(t, out, "mock")
	code, _, errs := runArgs(t, "devices", "--nvml-mock", "dgxa100")
	assert.Equal(t, 2, code)
	assert.Contains(t, errs, "unknown flag: --nvml-mock")
}

// TestDevicesOpenCL: devices lists this machine's OpenCL platforms and
// devices (PoCL under CI), or says why there are none.
func TestDevicesOpenCL(t *testing.T) {
	plats, clErr := opencl.Platforms()
	if clErr != nil && os.Getenv("CI") != "" {
		t.Fatalf("OpenCL needed under CI (.ci/run installs pocl-opencl-icd): %v", clErr)
	}
	code, out, errs := runArgs(t, "devices")
	require.Equal(t, 0, code, errs)
	code, jout, errs := runArgs(t, "devices", "--json")
	require.Equal(t, 0, code, errs)
	var j struct {
		OpenCL struct {
			Available bool   `json:"available"`
			Reason    string `json:"reason"`
			Platforms []struct {
				Name    string           `json:"name"`
				Version string           `json:"version"`
				Devices []map[string]any `json:"devices"`
			} `json:"platforms"`
		} `json:"opencl"`
	}
	require.NoError(t, json.Unmarshal([]byte(jout), &j))
	if clErr != nil {
		assert.Contains(t, out, "OpenCL: none ("+clErr.Error()+")")
		assert.False(t, j.OpenCL.Available)
		assert.Equal(t, clErr.Error(), j.OpenCL.Reason)
		assert.Empty(t, j.OpenCL.Platforms)
		return
	}
	assert.Contains(t, out, "\nOpenCL: "+plural(len(plats), "platform")+"\nPLATFORM ")
	assert.True(t, j.OpenCL.Available)
	require.Len(t, j.OpenCL.Platforms, len(plats))
	for pi, p := range plats {
		assert.Equal(t, p.Name, j.OpenCL.Platforms[pi].Name)
		assert.Equal(t, p.Version, j.OpenCL.Platforms[pi].Version)
		require.Len(t, j.OpenCL.Platforms[pi].Devices, len(p.Devices))
		for di, d := range p.Devices {
			info := d
			assert.Contains(t, out, info.Name)
			jd := j.OpenCL.Platforms[pi].Devices[di]
			assert.Equal(t, info.Name, jd["name"])
			assert.Equal(t, info.Version, jd["version"])
			assert.Equal(t, float64(info.ComputeUnits), jd["compute_units"])
			assert.Equal(t, float64(info.GlobalMemBytes), jd["memory_bytes"])
			assert.Equal(t, info.Type, jd["type"])
			assert.Positive(t, jd["compute_units"])
		}
	}
}
