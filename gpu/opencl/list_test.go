package opencl_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/gpu/opencl/internal/cl"
)

// TestPlatformsDescribeDevices: Platforms and Devices list what the
// binding finds, platform by platform and device by device, each
// described as the binding describes it (the type by its bits' names).
func TestPlatformsDescribeDevices(t *testing.T) {
	device(t)
	ps, err := opencl.Platforms()
	require.NoError(t, err)
	raw, err := cl.Platforms()
	require.NoError(t, err)
	require.Len(t, ps, len(raw))
	var all []opencl.Device
	for i, p := range ps {
		assert.Equal(t, raw[i].Name, p.Name)
		assert.Equal(t, raw[i].Vendor, p.Vendor)
		assert.True(t, strings.HasPrefix(p.Version, "OpenCL "), p.Version)
		require.Len(t, p.Devices, len(raw[i].Devices))
		for j, d := range p.Devices {
			want, got := raw[i].Devices[j].Info(), d.Info()
			assert.Equal(t, want.Name, d.String())
			assert.Equal(t, opencl.DeviceInfo{Name: want.Name, Vendor: want.Vendor, Version: want.Version,
				DriverVersion: want.DriverVersion, Platform: p.Name, Type: want.Type.String(), ComputeUnits: want.ComputeUnits,
				GlobalMemBytes: want.GlobalMemBytes, MaxAllocBytes: want.MaxAllocBytes, MaxWorkGroup: want.MaxWorkGroup,
				MaxWorkItems: want.MaxWorkItems, AddressBits: want.AddressBits, BaseAlignBytes: want.BaseAlignBytes,
				Available: want.Available, Extensions: want.Extensions}, got)
			assert.Positive(t, got.ComputeUnits)
			assert.Positive(t, got.GlobalMemBytes)
			for _, e := range got.Extensions {
				assert.True(t, got.HasExtension(e), e)
			}
			assert.False(t, got.HasExtension("cl_no_such_extension"))
		}
		all = append(all, p.Devices...)
	}
	ds, err := opencl.Devices()
	require.NoError(t, err)
	require.Len(t, ds, len(all))
	for i := range ds {
		assert.Equal(t, all[i].Info().Name, ds[i].Info().Name, "Devices is Platforms' devices in order")
	}
}

// TestNewDeviceZeroDevice: the zero Device is refused with an error, and
// nothing is left running.
func TestNewDeviceZeroDevice(t *testing.T) {
	d, err := opencl.NewDevice(opencl.Device{}, 1)
	assert.Nil(t, d)
	assert.EqualError(t, err, "opencl: open: the zero Device (take one from Platforms or Devices)")
}
