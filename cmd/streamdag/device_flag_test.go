package main

import (
	"context"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/internal/testdata"
)

// TestChooseDevice: --device resolved over what the backend leased: the
// leased OpenCL device when it has the extensions the flights kernels
// need; else, with auto, the CPU device and why, and with opencl an error
// naming the device and what it lacks, or why nothing was leased.
func TestChooseDevice(t *testing.T) {
	int64Atomics := []string{"cl_khr_byte_addressable_store", "cl_khr_int64_base_atomics", "cl_khr_int64_extended_atomics", "cl_khr_fp64"}
	pocl := opencl.Info{Name: "pthread-cpu", Type: "CPU|default", Platform: "Portable Computing Language", Available: true, Extensions: int64Atomics}
	gpuDev := opencl.Info{Name: "NVIDIA H100", Type: "GPU", Platform: "NVIDIA CUDA", Available: true, Extensions: int64Atomics}
	noExtended := gpuDev
	noExtended.Extensions = []string{"cl_khr_int64_base_atomics"}
	noInt64 := gpuDev
	noInt64.Extensions = []string{"cl_khr_fp64"}
	noLib := "opencl: opencl: unavailable: libOpenCL.so.1: cannot open shared object file"
	tests := []struct {
		name    string
		flag    string
		l       leased
		openCL  bool
		why     []string // substrings of why, or of the error
		wantErr bool
	}{
		{"cpu ignores the lease", deviceCPU, leased{held: true, id: "opencl0", info: &gpuDev}, false, []string{"--device cpu"}, false},
		{"auto with PoCL only", deviceAuto,
			leased{why: "no GPU: NVML: libnvidia-ml.so.1 not found; opencl: opencl0 (pthread-cpu) is a cpu device: not leased (lease.WithLeaseTypes [gpu])"}, false,
			[]string{"--device auto: no OpenCL GPU (no GPU: NVML", "opencl0 (pthread-cpu) is a cpu device: not leased", "), so every kernel runs on the CPU device"}, false},
		{"auto with no GPU device node", deviceAuto,
			leased{why: "no GPU: NVML unavailable", notProbed: "no GPU device node (/dev/nvidia[0-9]*, /dev/dri/renderD*, /dev/kfd)"}, false,
			[]string{"--device auto: no GPU device node (/dev/nvidia[0-9]*, /dev/dri/renderD*, /dev/kfd): OpenCL not probed; running on the CPU device"}, false},
		{"auto with an NVML GPU no driver runs", deviceAuto,
			leased{why: "gpu0 (NVIDIA H200) leased, but no registered driver runs it (no CUDA device yet; no OpenCL driver lists a GPU with its UUID or PCI bus ID): running on the CPU device", slots: 1}, false,
			[]string{"--device auto: no OpenCL GPU (gpu0 (NVIDIA H200) leased, but no registered driver runs it", "so every kernel runs on the CPU device"}, false},
		{"auto with an OpenCL GPU", deviceAuto,
			leased{held: true, id: "opencl0", info: &gpuDev, why: "opencl0 (NVIDIA H100, NVIDIA Corporation) leased", slots: 1}, true,
			[]string{"--device auto: OpenCL GPU opencl0 (NVIDIA H100, NVIDIA Corporation) leased"}, false},
		{"auto with a GPU lacking extended atomics", deviceAuto,
			leased{held: true, id: "opencl0", info: &noExtended, why: "opencl0 (NVIDIA H100) leased", slots: 1}, false,
			[]string{"--device auto: opencl0 (NVIDIA H100, GPU, NVIDIA CUDA) lacks cl_khr_int64_extended_atomics, which the flights kernels need", "so every kernel runs on the CPU device"}, false},
		{"auto with a GPU lacking 64-bit atomics", deviceAuto,
			leased{held: true, id: "opencl0", info: &noInt64, slots: 1}, false,
			[]string{"lacks cl_khr_int64_base_atomics and cl_khr_int64_extended_atomics", "CPU device"}, false},
		{"auto with a leased device of another kind", deviceAuto,
			leased{held: true, id: "gpu0", why: "gpu0 (NVIDIA H100) leased", slots: 1}, false,
			[]string{"--device auto: gpu0 is no OpenCL device: the flights kernels have OpenCL C only", "CPU device"}, false},
		{"opencl takes the leased PoCL", deviceOpenCL,
			leased{held: true, id: "opencl0", info: &pocl, why: "opencl0 (pthread-cpu, GenuineIntel) leased", slots: 1}, true,
			[]string{"--device opencl: opencl0 (pthread-cpu, GenuineIntel) leased, beside the CPU device"}, false},
		{"opencl with a device lacking extended atomics", deviceOpenCL,
			leased{held: true, id: "opencl1", info: &noExtended, slots: 2}, false,
			[]string{"--device opencl: opencl1 (NVIDIA H100, GPU, NVIDIA CUDA) lacks cl_khr_int64_extended_atomics, which the flights kernels need (64-bit atomics on local memory); use --device cpu"}, true},
		{"opencl without a library", deviceOpenCL,
			leased{why: "no GPU: --device opencl leases OpenCL devices only; " + noLib, notes: []string{noLib}}, false,
			[]string{"--device opencl: no OpenCL device: looked for libOpenCL.so.1 and the platforms its ICD loader lists (/etc/OpenCL/vendors): opencl: unavailable: libOpenCL.so.1: cannot open shared object file;",
				"apt-get install pocl-opencl-icd ocl-icd-libopencl1", "--device cpu"}, true},
		{"opencl without devices", deviceOpenCL, leased{why: "no GPU: --device opencl leases OpenCL devices only"}, false,
			[]string{"--device opencl: no OpenCL device: looked for libOpenCL.so.1", "(/etc/OpenCL/vendors): no OpenCL device;", "pocl-opencl-icd"}, true},
		{"opencl whose device does not open", deviceOpenCL,
			leased{why: "opencl0 (pthread-cpu) leased, but driver opencl could not open it: out of host memory: running on the CPU device", slots: 1}, false,
			[]string{"--device opencl: no OpenCL device", "driver opencl could not open it: out of host memory"}, true},
		{"unknown", "gpu", leased{}, false, []string{"--device gpu: want cpu, opencl or auto"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := chooseDevice(tc.flag, tc.l)
			text := c.why
			if tc.wantErr {
				require.Error(t, err)
				text = err.Error()
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.openCL, c.openCL)
			for _, w := range tc.why {
				assert.Contains(t, text, w)
			}
		})
	}
}

// TestRunFlightsBadDevice: an unknown --device is a usage error, and
// --device opencl with --topology is refused before anything runs.
func TestRunFlightsBadDevice(t *testing.T) {
	code, _, errs := runArgs(t, "run", "flights", "--device", "cuda")
	assert.Equal(t, 2, code)
	assert.Contains(t, errs, "--device cuda: want cpu, opencl or auto")
	code, _, errs = runArgs(t, "run", "flights", "--device", "opencl", "--topology", "sim:dgx1-v100")
	assert.Equal(t, 2, code)
	assert.Contains(t, errs, "--device opencl and --topology")
}

// needOpenCL skips the test when no OpenCL device is found (fails under
// CI, whose .ci/run installs PoCL).
func needOpenCL(t *testing.T) {
	t.Helper()
	if ds, err := opencl.Devices(); err != nil || len(ds) == 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("no OpenCL device: %v", err)
		}
		t.Skipf("no OpenCL device (apt-get install pocl-opencl-icd ocl-icd-libopencl1): %v", err)
	}
}

// TestRunFlightsDeviceOpenCLSameCSV: --device opencl writes the CSV
// --device cpu writes, byte for byte, on the embedded sample and on the
// Parquet file and both Arrow IPC files, and its summary names the
// kernels each device ran and the bytes copied.
func TestRunFlightsDeviceOpenCLSameCSV(t *testing.T) {
	needOpenCL(t)
	for _, input := range []string{"", "flights-3m.parquet", "flights-200k.arrow", "flights-231k-multibatch.arrow"} {
		name := input
		if name == "" {
			name = "embedded"
		}
		t.Run(name, func(t *testing.T) {
			var args []string
			if input != "" {
				args = []string{"--input", testdata.File(t, input)}
			}
			dir := t.TempDir()
			csvs := map[string]string{}
			for _, dev := range []string{deviceCPU, deviceOpenCL} {
				path := filepath.Join(dir, dev+".csv")
				code, _, errs := runArgs(t, append([]string{"run", "flights", "--device", dev, "--top", "0", "--out", path}, args...)...)
				require.Equal(t, 0, code, errs)
				b, err := os.ReadFile(path)
				require.NoError(t, err)
				csvs[dev] = string(b)
				if dev == deviceOpenCL {
					assert.Contains(t, errs, "--device opencl: ")
					assert.Regexp(t, `kernels: cpu: source( ×\d+)?, columns ×(\d+), decode ×\d+, merge, sort, topk, write; opencl0: filter ×\d+, partial ×\d+; \d+ copies between the devices, \d+\.\d MB\n`, errs)
				} else {
					assert.Contains(t, errs, "; --device cpu\n")
				}
			}
			assert.Greater(t, strings.Count(csvs[deviceCPU], "\n"), 20)
			assert.Equal(t, csvs[deviceCPU], csvs[deviceOpenCL])
		})
	}
}

// cliChildEnv holds, one a line, the arguments TestCLIChild runs the
// command line with in a subprocess.
const cliChildEnv = "STREAMDAG_CLI_CHILD_ARGS"

// cliChildNodesEnv holds, one a line, the gpuDeviceNodes of the
// TestCLIChild subprocess (unset: the real ones).
const cliChildNodesEnv = "STREAMDAG_CLI_CHILD_GPU_NODES"

// TestCLIChild is the subprocess of the tests that need a process of
// their own (an environment the OpenCL loader reads once): it runs the
// command line with the arguments in cliChildEnv and exits with its
// status. Without cliChildEnv it does nothing.
func TestCLIChild(t *testing.T) {
	args := os.Getenv(cliChildEnv)
	if args == "" {
		t.Skip("runs only as the subprocess of another test")
	}
	if nodes := os.Getenv(cliChildNodesEnv); nodes != "" {
		gpuDeviceNodes = strings.Split(nodes, "\n")
	}
	os.Exit(run(context.Background(), strings.Split(args, "\n"), strings.NewReader(""), os.Stdout, os.Stderr))
}

// TestRunFlightsWithoutOpenCL: with no OpenCL platform (the ICD loader
// pointed at an empty vendors directory), --device opencl is an error
// naming what it looked for and how to install PoCL, and --device auto
// on a host with a GPU device node runs on the CPU device and says why.
func TestRunFlightsWithoutOpenCL(t *testing.T) {
	if _, err := opencl.Platforms(); err != nil {
		t.Skipf("no OpenCL loader to point elsewhere: %v", err)
	}
	vendors := t.TempDir()
	nodes := withGPUNodes(t, "renderD128")
	child := func(args ...string) (int, string) {
		cmd := osexec.Command(os.Args[0], "-test.run=^TestCLIChild$")
		cmd.Env = append(os.Environ(), cliChildEnv+"="+strings.Join(args, "\n"), "OCL_ICD_VENDORS="+vendors,
			cliChildNodesEnv+"="+strings.Join(nodes, "\n"))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *osexec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), stderr.String()
		}
		require.NoError(t, err)
		return 0, stderr.String()
	}
	code, errs := child("run", "flights", "--device", "opencl")
	assert.Equal(t, 1, code, errs)
	assert.Contains(t, errs, "streamdag: --device opencl: no OpenCL device: looked for libOpenCL.so.1 and the platforms its ICD loader lists (/etc/OpenCL/vendors): opencl: no platform")
	assert.Contains(t, errs, "apt-get install pocl-opencl-icd ocl-icd-libopencl1")
	code, errs = child("run", "flights", "--top", "1")
	assert.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "--device auto: no OpenCL GPU (no GPU: ")
	assert.Contains(t, errs, "; opencl: opencl: no platform")
	assert.Contains(t, errs, "so every kernel runs on the CPU device")
}

// TestRunFlightsDeviceOpenCLFail: --fail fails a kernel that has OpenCL
// C too: with --device opencl, filter[1] fails with the injected failure
// (it runs its failing Go function, on the CPU device), partial[1] is
// skipped, and the result is partial.
func TestRunFlightsDeviceOpenCLFail(t *testing.T) {
	needOpenCL(t)
	code, _, errs := runArgs(t, "run", "flights", "--device", "opencl", "--fail", "filter[1]", "--top", "3")
	assert.Equal(t, 1, code, errs)
	assert.Contains(t, errs, `filter[1]: failed (failure #1): exec: kernel "filter[1]": dag: injected failure`)
	assert.Contains(t, errs, "partial[1]: skipped (failure #1) ← copy keep[1] cpu→opencl0 ← filter[1]")
	assert.Contains(t, errs, "PARTIAL RESULT: 1 of 4 partitions lost")
}

// TestRunFlightsDeviceAutoWithoutGPU: where the OpenCL devices are CPUs
// (PoCL) on a host with a GPU device node, --device auto (the default)
// runs every kernel on the CPU device and says why, naming the OpenCL
// devices it found.
func TestRunFlightsDeviceAutoWithoutGPU(t *testing.T) {
	needOpenCL(t)
	withGPUNodes(t, "renderD128")
	ds, err := opencl.Devices()
	require.NoError(t, err)
	for _, d := range ds {
		if strings.Contains(d.Type, "GPU") {
			t.Skipf("an OpenCL GPU is present (%s): auto takes it", d.Name)
		}
	}
	code, _, errs := runArgs(t, "run", "flights", "--top", "1")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "--device auto: no OpenCL GPU (no GPU: ")
	assert.Contains(t, errs, "opencl: opencl0 ("+ds[0].Name+") is a cpu device: not leased")
	assert.Contains(t, errs, "so every kernel runs on the CPU device\n")
	assert.Regexp(t, `launches on \d+ streams? of cpu,`, errs)
	assert.NotContains(t, errs, "kernels: ", "no per-device kernel line: every kernel ran on the CPU device")
	assert.NotContains(t, errs, "copies between the devices")
}
