package kvio_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/kvio"
)

// clearEnv unsets every KVIKIO_* variable kvio reads, for this test.
func clearEnv(t *testing.T) {
	for _, v := range []string{kvio.EnvCompatMode, kvio.EnvNumThreads, kvio.EnvTaskSize, kvio.EnvGDSThreshold,
		kvio.EnvBounceBufferSize, kvio.EnvAutoDirectIORead, kvio.EnvAutoDirectIOWrite} {
		t.Setenv(v, "")
	}
}

func TestDefaults(t *testing.T) {
	clearEnv(t)
	want := kvio.Options{CompatMode: kvio.CompatAuto, NumThreads: 1, TaskSizeBytes: 4 << 20,
		GDSThresholdBytes: 1 << 20, BounceBufferBytes: 16 << 20}
	assert.Equal(t, want, kvio.DefaultOptions())
	o, err := kvio.Settings()
	require.NoError(t, err)
	assert.Equal(t, want, o)

	f, err := kvio.NewFile("mem", bytes.NewReader(nil), 0)
	require.NoError(t, err)
	assert.Equal(t, want, f.Options())

	f, err = kvio.NewFile("mem", bytes.NewReader(nil), 0, kvio.WithTaskSize(7), kvio.WithThreads(3),
		kvio.WithGDSThreshold(0), kvio.WithBounceBufferSize(1), kvio.WithCompatMode(kvio.CompatOn), kvio.WithDirectIO(true, false))
	require.NoError(t, err)
	assert.Equal(t, kvio.Options{CompatMode: kvio.CompatOn, NumThreads: 3, TaskSizeBytes: 7, BounceBufferBytes: 1, DirectIORead: true}, f.Options())
}

func TestSettingsFromEnv(t *testing.T) {
	clearEnv(t)
	t.Setenv(kvio.EnvCompatMode, "ON")
	t.Setenv(kvio.EnvNumThreads, "8")
	t.Setenv(kvio.EnvTaskSize, "1048576")
	t.Setenv(kvio.EnvGDSThreshold, "0")
	t.Setenv(kvio.EnvBounceBufferSize, "65536")
	t.Setenv(kvio.EnvAutoDirectIORead, "yes")
	t.Setenv(kvio.EnvAutoDirectIOWrite, "false")
	o, err := kvio.Settings()
	require.NoError(t, err)
	assert.Equal(t, kvio.Options{CompatMode: kvio.CompatOn, NumThreads: 8, TaskSizeBytes: 1 << 20, BounceBufferBytes: 64 << 10, DirectIORead: true}, o)
	assert.Equal(t, "compat mode on, 8 threads, task 1 MiB, gds threshold 0 bytes, bounce buffer 64 KiB, direct I/O reads", o.String())

	// Options win over the environment.
	f, err := kvio.NewFile("mem", bytes.NewReader(nil), 0, kvio.WithThreads(2))
	require.NoError(t, err)
	assert.Equal(t, 2, f.Options().NumThreads)
	assert.Equal(t, int64(1<<20), f.Options().TaskSizeBytes)
}

func TestSettingsInvalidEnv(t *testing.T) {
	tests := []struct{ name, value, want string }{
		{kvio.EnvCompatMode, "maybe", `kvio: KVIKIO_COMPAT_MODE="maybe": want on, off or auto`},
		{kvio.EnvNumThreads, "zero", `kvio: KVIKIO_NTHREADS="zero": want an integer in [1, 65536]`},
		{kvio.EnvNumThreads, "0", `kvio: KVIKIO_NTHREADS="0": want an integer in [1, 65536]`},
		{kvio.EnvNumThreads, "1000000", `kvio: KVIKIO_NTHREADS="1000000": want an integer in [1, 65536]`},
		{kvio.EnvTaskSize, "4MiB", `kvio: KVIKIO_TASK_SIZE="4MiB": want a positive integer (bytes)`},
		{kvio.EnvTaskSize, "-1", `kvio: KVIKIO_TASK_SIZE="-1": want a positive integer (bytes)`},
		{kvio.EnvGDSThreshold, "-5", `kvio: KVIKIO_GDS_THRESHOLD="-5": want a non-negative integer (bytes)`},
		{kvio.EnvBounceBufferSize, "0", `kvio: KVIKIO_BOUNCE_BUFFER_SIZE="0": want a positive integer (bytes)`},
		{kvio.EnvAutoDirectIORead, "auto", `kvio: KVIKIO_AUTO_DIRECT_IO_READ="auto": want on or off`},
	}
	for _, tc := range tests {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			clearEnv(t)
			t.Setenv(tc.name, tc.value)
			_, err := kvio.Settings()
			assert.EqualError(t, err, tc.want)
			_, err = kvio.NewFile("mem", bytes.NewReader(nil), 0)
			assert.EqualError(t, err, tc.want)
			_, err = kvio.Open(filepath.Join(t.TempDir(), "absent"))
			assert.EqualError(t, err, tc.want, "settings are checked before opening")
			assert.Equal(t, tc.want, kvio.Describe())
		})
	}
}

func TestInvalidOptions(t *testing.T) {
	clearEnv(t)
	invalid := []struct {
		name string
		opt  kvio.Option
		want string
	}{
		{"zero task size", kvio.WithTaskSize(0), "kvio: WithTaskSize(0): task size must be positive"},
		{"negative task size", kvio.WithTaskSize(-4096), "kvio: WithTaskSize(-4096): task size must be positive"},
		{"zero threads", kvio.WithThreads(0), "kvio: WithThreads(0): thread count must be in [1, 65536]"},
		{"negative threads", kvio.WithThreads(-2), "kvio: WithThreads(-2): thread count must be in [1, 65536]"},
		{"negative threshold", kvio.WithGDSThreshold(-1), "kvio: WithGDSThreshold(-1): threshold must not be negative"},
		{"zero bounce buffer", kvio.WithBounceBufferSize(0), "kvio: WithBounceBufferSize(0): size must be positive"},
		{"unknown compat mode", kvio.WithCompatMode(7), "kvio: WithCompatMode(7): unknown compat mode"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kvio.NewFile("mem", bytes.NewReader(nil), 0, tc.opt)
			assert.EqualError(t, err, tc.want)
			_, err = kvio.Open(filepath.Join(t.TempDir(), "absent"), tc.opt)
			assert.EqualError(t, err, tc.want, "options are checked before opening")
		})
	}
	_, err := kvio.NewFile("mem", bytes.NewReader(nil), -1)
	assert.EqualError(t, err, "kvio: NewFile mem: negative size -1 bytes")
	// A nil option is ignored, as every constructor of the module ignores one.
	f, err := kvio.NewFile("mem", bytes.NewReader([]byte{1, 2}), 2, nil, kvio.WithThreads(2))
	require.NoError(t, err)
	assert.Equal(t, 2, f.Options().NumThreads)
	require.NoError(t, f.Close())
}

func TestParseCompatMode(t *testing.T) {
	for in, want := range map[string]kvio.CompatMode{
		"on": kvio.CompatOn, "TRUE": kvio.CompatOn, "yes": kvio.CompatOn, "1": kvio.CompatOn,
		"off": kvio.CompatOff, "False": kvio.CompatOff, "NO": kvio.CompatOff, "0": kvio.CompatOff,
		"auto": kvio.CompatAuto, " AUTO ": kvio.CompatAuto,
	} {
		m, err := kvio.ParseCompatMode(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, m, in)
	}
	_, err := kvio.ParseCompatMode("2")
	assert.EqualError(t, err, `kvio: compat mode "2": want on, off or auto`)
	assert.Equal(t, "on off auto CompatMode(9)", strings.Join([]string{kvio.CompatOn.String(), kvio.CompatOff.String(), kvio.CompatAuto.String(), kvio.CompatMode(9).String()}, " "))
}

// TestCompatMode runs on hosts without libcufile (CI, this project's
// machines); where it is installed, auto still resolves to POSIX, with
// another reason, and the test says so.
func TestCompatMode(t *testing.T) {
	clearEnv(t)
	auto, err := kvio.Resolve(kvio.CompatAuto)
	require.NoError(t, err)
	assert.False(t, auto.CuFile, "kvio has no cuFile path: auto is POSIX")
	if auto.Library != "" {
		t.Logf("libcufile present here (%s): %s", auto.Library, auto)
	} else {
		assert.Equal(t, "auto → posix (libcufile not found)", auto.String())
	}
	m, err := kvio.Mode()
	require.NoError(t, err)
	assert.Equal(t, auto, m)

	on, err := kvio.Resolve(kvio.CompatOn)
	require.NoError(t, err)
	assert.Equal(t, "on → posix (compat mode on)", on.String())

	_, err = kvio.Resolve(kvio.CompatOff)
	assert.ErrorIs(t, err, kvio.ErrNoCuFile)
	assert.ErrorContains(t, err, "compat mode off needs cuFile: "+auto.Reason)

	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, writeFile(path, pattern(10)))
	_, err = kvio.Open(path, kvio.WithCompatMode(kvio.CompatOff))
	assert.ErrorIs(t, err, kvio.ErrNoCuFile, "off without cuFile does not open")
	assert.ErrorContains(t, err, "kvio: open "+path)

	t.Setenv(kvio.EnvCompatMode, "off")
	_, err = kvio.Mode()
	assert.ErrorIs(t, err, kvio.ErrNoCuFile)
	assert.True(t, strings.HasPrefix(kvio.Describe(), "kvio: cuFile I/O unavailable: compat mode off needs cuFile"), kvio.Describe())
	// NewFile reads a caller's reader: compat mode does not apply.
	f, err := kvio.NewFile("mem", bytes.NewReader(nil), 0)
	require.NoError(t, err)
	assert.False(t, f.Mode().CuFile)
}

func TestDescribe(t *testing.T) {
	clearEnv(t)
	r, err := kvio.Mode()
	require.NoError(t, err)
	assert.Equal(t, "kvio: compat mode "+r.String()+", 1 thread, task 4 MiB, gds threshold 1 MiB, bounce buffer 16 MiB, direct I/O off", kvio.Describe())
	t.Setenv(kvio.EnvCompatMode, "on")
	t.Setenv(kvio.EnvNumThreads, "4")
	assert.Equal(t, "kvio: compat mode on → posix (compat mode on), 4 threads, task 4 MiB, gds threshold 1 MiB, bounce buffer 16 MiB, direct I/O off", kvio.Describe())
}
