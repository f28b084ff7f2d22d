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
	var all []opencl.Info
	for i, p := range ps {
		assert.Equal(t, raw[i].Name, p.Name)
		assert.Equal(t, raw[i].Vendor, p.Vendor)
		assert.True(t, strings.HasPrefix(p.Version, "OpenCL "), p.Version)
		require.Len(t, p.Devices, len(raw[i].Devices))
		for j, d := range p.Devices {
			want, got := raw[i].Devices[j].Info(), d
			assert.Equal(t, []any{want.Name, want.Vendor, want.Version, want.DriverVersion, p.Name, want.Type.String(),
				want.ComputeUnits, want.GlobalMemBytes, want.MaxAllocBytes, want.MaxWorkGroup, want.MaxWorkItems,
				want.AddressBits, want.BaseAlignBytes, want.Available, want.Extensions},
				[]any{got.Name, got.Vendor, got.Version, got.DriverVersion, got.Platform, got.Type,
					got.ComputeUnits, got.GlobalMemBytes, got.MaxAllocBytes, got.MaxWorkGroup, got.MaxWorkItems,
					got.AddressBits, got.BaseAlignBytes, got.Available, got.Extensions})
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
		assert.Equal(t, all[i].Name, ds[i].Name, "Devices is Platforms' devices in order")
	}
}

// TestNewDeviceZeroInfo: the zero Info is refused with an error, and
// nothing is left running.
func TestNewDeviceZeroInfo(t *testing.T) {
	d, err := opencl.NewDevice(opencl.Info{})
	assert.Nil(t, d)
	assert.EqualError(t, err, "opencl: new device: the zero Info names no device (take one from Platforms, Devices or InfoOf)")
}

// TestNewDeviceOpensTheHandle: NewDevice opens the device an Info names
// and describes it as the platform does, whatever the Info's fields say;
// InfoOf gives that description back.
func TestNewDeviceOpensTheHandle(t *testing.T) {
	info := device(t)
	edited := info
	edited.Name, edited.GlobalMemBytes, edited.BaseAlignBytes = "edited", 1, 3
	d, err := opencl.NewDevice(edited)
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.Close()) }()
	assert.Equal(t, info.Name, d.Info().Name)
	assert.Equal(t, info.GlobalMemBytes, d.Info().MemoryBytes)
	got, ok := opencl.InfoOf(d)
	require.True(t, ok)
	assert.Equal(t, info.Name, got.Name)
	assert.Equal(t, info.BaseAlignBytes, got.BaseAlignBytes)
	assert.Equal(t, info.BaseAlignBytes, opencl.BaseAlignForTest(d))
}
