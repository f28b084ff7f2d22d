package topology_test

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/topology"
)

func TestParseDeviceID(t *testing.T) {
	tests := []struct {
		in      string
		want    topology.DeviceID
		wantErr bool
	}{
		{in: "cpu", want: topology.CPU},
		{in: "gpu0", want: topology.GPU(0)},
		{in: "gpu7", want: topology.GPU(7)},
		{in: "gpu12", want: topology.GPU(12)},
		{in: "opencl0", want: topology.OpenCL(0)},
		{in: "opencl3", want: topology.OpenCL(3)},
		{in: "opencl", wantErr: true},
		{in: "opencl01", wantErr: true},
		{in: "", wantErr: true},
		{in: "gpu", wantErr: true},
		{in: "gpu-1", wantErr: true},
		{in: "gpu+1", wantErr: true},
		{in: "gpu01", wantErr: true},
		{in: "gpu00", wantErr: true},
		{in: "gpu 0", wantErr: true},
		{in: " gpu0", wantErr: true},
		{in: "gpu0 ", wantErr: true},
		{in: "gpu0x", wantErr: true},
		{in: "gpu1e3", wantErr: true},
		{in: "gpu99999999999999999999999", wantErr: true},
		{in: "GPU0", wantErr: true},
		{in: "CPU", wantErr: true},
		{in: "cpu0", wantErr: true},
		{in: "tpu0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.in), func(t *testing.T) {
			got, err := topology.ParseDeviceID(tt.in)
			if tt.wantErr {
				require.Error(t, err)
				assert.EqualError(t, err, "topology: unknown device "+strconv.Quote(tt.in)+` (want "cpu", "gpuN" or "openclN")`)
				assert.Equal(t, topology.DeviceID{}, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.in, got.String())
		})
	}
}

func TestDeviceIDString(t *testing.T) {
	for _, id := range []topology.DeviceID{topology.CPU, {}, topology.GPU(0), topology.GPU(1), topology.GPU(12), topology.GPU(1 << 20), topology.OpenCL(0), topology.OpenCL(2)} {
		s := id.String()
		got, err := topology.ParseDeviceID(s)
		require.NoError(t, err, s)
		assert.Equal(t, id, got, s)
	}
	assert.Equal(t, "cpu", topology.DeviceID{}.String(), "the zero value is the CPU")
	assert.Equal(t, "gpu3", topology.GPU(3).String())

	// Usable as a map key.
	m := map[topology.DeviceID]int{topology.GPU(1): 1}
	id, err := topology.ParseDeviceID("gpu1")
	require.NoError(t, err)
	assert.Equal(t, 1, m[id])
}

func TestKindString(t *testing.T) {
	assert.Equal(t, "cpu", topology.KindCPU.String())
	assert.Equal(t, "gpu", topology.KindGPU.String())
	assert.Equal(t, "opencl", topology.KindOpenCL.String())
	assert.Equal(t, "kind(7)", topology.Kind(7).String())
}

func TestComputeCapabilityString(t *testing.T) {
	tests := []struct {
		cc   topology.ComputeCapability
		want string
	}{
		{topology.ComputeCapability{}, ""},
		{topology.ComputeCapability{Major: 6, Minor: 0}, "6.0"},
		{topology.ComputeCapability{Major: 8, Minor: 6}, "8.6"},
		{topology.ComputeCapability{Major: 9, Minor: 0}, "9.0"},
		{topology.ComputeCapability{Major: 12, Minor: 1}, "12.1"},
		{topology.ComputeCapability{Major: 0, Minor: 5}, "0.5"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.cc.String(), "%#v", tt.cc)
	}
}

func TestCPUDevice(t *testing.T) {
	d := topology.CPUDevice()
	assert.Equal(t, topology.CPU, d.ID)
	assert.Equal(t, runtime.NumCPU(), d.Cores)
	assert.NotEmpty(t, d.Name)
	assert.Empty(t, d.UUID)
	assert.Empty(t, d.PCIBusID)
	assert.Zero(t, d.ComputeCapability)
	assert.GreaterOrEqual(t, d.MemoryBytes, d.FreeMemoryBytes)
	if runtime.GOOS != "linux" {
		assert.Equal(t, -1, d.NUMANode)
		return
	}
	assert.Positive(t, d.MemoryBytes)
	assert.Zero(t, d.MemoryBytes%1024, "MemTotal is in kB")
	assert.Positive(t, d.FreeMemoryBytes)
	assert.Equal(t, 0, d.NUMANode)
}

// FuzzParseDeviceID checks that ParseDeviceID never panics and accepts
// only the canonical spelling of an id.
func FuzzParseDeviceID(f *testing.F) {
	for _, s := range []string{"cpu", "gpu0", "gpu12", "gpu", "gpu-1", "gpu01", "GPU0", "tpu0", "", "gpu+1", "gpu9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := topology.ParseDeviceID(s)
		if err != nil {
			assert.Contains(t, err.Error(), strconv.Quote(s))
			return
		}
		assert.Equal(t, s, id.String())
		assert.GreaterOrEqual(t, id.Index, 0)
	})
}
