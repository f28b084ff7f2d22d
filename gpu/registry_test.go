package gpu_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
)

// fakeDriver records the config it was opened with and answers err.
type fakeDriver struct {
	got *gpu.Config
	err error
}

func (d fakeDriver) Open(_ context.Context, cfg gpu.Config) (gpu.Set, error) {
	*d.got = cfg
	if d.err != nil {
		return nil, d.err
	}
	return fakeSet{}, nil
}

type fakeSet struct{}

func (fakeSet) Devices() []gpu.Device { return nil }
func (fakeSet) Close() error          { return nil }

var (
	got  gpu.Config // the config the test drivers were last opened with
	boom = errors.New("boom")
)

// The test drivers register once per process, as real drivers do in init,
// so the test can run with -count > 1.
func init() {
	gpu.Register("test-ok", fakeDriver{got: &got})
	gpu.Register("test-fail", fakeDriver{got: &got, err: boom})
}

func TestRegistry(t *testing.T) {
	assert.Subset(t, gpu.Drivers(), []string{"test-fail", "test-ok"})
	assert.IsNonDecreasing(t, gpu.Drivers(), "sorted")

	set, err := gpu.Open(t.Context(), "test-ok", gpu.WithStreams(3))
	require.NoError(t, err)
	assert.Equal(t, fakeSet{}, set)
	assert.Equal(t, 3, got.Streams, "the config reaches the driver")

	_, err = gpu.Open(t.Context(), "test-fail")
	assert.ErrorIs(t, err, boom)
	assert.Zero(t, got.Streams, "no option: the driver's default")

	_, err = gpu.Open(t.Context(), "test-ok", gpu.WithStreams(0))
	assert.EqualError(t, err, "gpu: WithStreams(0): want at least 1 stream")
	_, err = gpu.Open(t.Context(), "test-ok", gpu.WithDriverSetting(nil))
	assert.EqualError(t, err, "gpu: WithDriverSetting: nil setting or no driver kind")

	_, err = gpu.Open(t.Context(), "opencl-missing")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `gpu: no driver "opencl-missing" registered`)
	assert.Contains(t, err.Error(), "test-ok")

	for _, tc := range []struct {
		name string
		kind string
		d    gpu.Driver
	}{
		{"empty kind", "", fakeDriver{got: &got}},
		{"nil driver", "test-nil", nil},
		{"twice", "test-ok", fakeDriver{got: &got}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Panics(t, func() { gpu.Register(tc.kind, tc.d) })
		})
	}
	assert.NotContains(t, gpu.Drivers(), "test-nil")
}
