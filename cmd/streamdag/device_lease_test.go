package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/kvio"
	"github.com/streamdag/streamdag/lease"
	"github.com/streamdag/streamdag/topology"
)

// gpuLikeKind is the kind of leaseCountingDriver in the registry.
const gpuLikeKind = "test-opencl-as-gpu"

// leaseCountingDriver lists the OpenCL devices as gpu/opencl's driver
// does, but every one of them as a GPU (so a backend with the default
// LeaseTypes leases PoCL's CPU device as it would an OpenCL GPU), and
// keeps every device it opens, so a test can count the opens and see that
// each was closed.
type leaseCountingDriver struct {
	mu     sync.Mutex
	opened []gpu.Device
	onOpen func() // when set, called after each open
}

var countingDriver = &leaseCountingDriver{}

func init() { gpu.Register(gpuLikeKind, countingDriver) }

func (d *leaseCountingDriver) Open(ctx context.Context, cfg gpu.Config) (gpu.Set, error) {
	drv, err := gpu.Lookup(opencl.Kind)
	if err != nil {
		return nil, err
	}
	return drv.Open(ctx, cfg)
}

// enumerateOpenCL lists the devices of gpu/opencl's driver, opening none.
func enumerateOpenCL(ctx context.Context) ([]gpu.Found, error) {
	drv, err := gpu.Lookup(opencl.Kind)
	if err != nil {
		return nil, err
	}
	enum, ok := drv.(gpu.Enumerator)
	if !ok {
		return nil, fmt.Errorf("test driver: driver %q is not a gpu.Enumerator", opencl.Kind)
	}
	return enum.Enumerate(ctx)
}

func (d *leaseCountingDriver) Enumerate(ctx context.Context) ([]gpu.Found, error) {
	fs, err := enumerateOpenCL(ctx)
	for i := range fs {
		fs[i].Type = "gpu"
	}
	return fs, err
}

// OpenDevice opens the device of f as gpu/opencl's driver does: the
// available device at f's position among the ones Enumerate lists.
func (d *leaseCountingDriver) OpenDevice(ctx context.Context, f gpu.Found, cfg gpu.Config) (gpu.Device, error) {
	fs, err := enumerateOpenCL(ctx)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(fs, func(g gpu.Found) bool { return g.Key == f.Key })
	ds, err := opencl.Devices()
	if err != nil {
		return nil, err
	}
	ds = slices.DeleteFunc(ds, func(d opencl.Info) bool { return !d.Available })
	if i < 0 || i >= len(ds) {
		return nil, fmt.Errorf("test driver: no device %q", f.Key)
	}
	streams := cfg.Streams
	if streams == 0 {
		streams = opencl.DefaultStreams
	}
	dev, err := opencl.NewDevice(ds[i], opencl.WithStreams(streams), opencl.WithIndex(f.Device.ID.Index))
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.opened = append(d.opened, dev)
	onOpen := d.onOpen
	d.mu.Unlock()
	if onOpen != nil {
		onOpen()
	}
	return dev, nil
}

// take returns the devices opened since the last take.
func (d *leaseCountingDriver) take() []gpu.Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.opened
	d.opened = nil
	return out
}

// useDriver makes --device opencl and auto lease from the driver kind
// for the rest of the test, on a host with a GPU device node (so auto
// asks the driver).
func useDriver(t *testing.T, kind string) {
	withGPUNodes(t, "renderD128")
	old := openCLDriver
	openCLDriver = kind
	countingDriver.take()
	t.Cleanup(func() { openCLDriver = old })
}

// assertClosed checks that d was closed: its streams take no task any
// more (nor its memory an allocation, for a device of code).
func assertClosed(t *testing.T, d gpu.Device) {
	t.Helper()
	err := d.Stream(0).Launch(gpu.TaskFunc(func() {}))
	assert.ErrorIs(t, err, gpu.ErrClosed, "%s is still open", d.ID())
	if cd, ok := d.(gpu.CodeDevice); ok {
		_, err := cd.Alloc(8)
		assert.ErrorIs(t, err, gpu.ErrClosed, "%s is still open", d.ID())
	}
}

// leaseEntries reads the leases of a backend snapshot in a --report
// ("backend") or --metrics file.
func leaseEntries(t *testing.T, path string, inBackend bool) []lease.SlotState {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var m lease.MetricsSnapshot
	if inBackend {
		var r struct {
			Backend *lease.MetricsSnapshot `json:"backend"`
		}
		require.NoError(t, json.Unmarshal(b, &r))
		require.NotNil(t, r.Backend, "the report has the backend's snapshot")
		m = *r.Backend
	} else {
		require.NoError(t, json.Unmarshal(b, &m))
	}
	return m.Leases
}

// TestRunFlightsDeviceOpenCLLeased: --device opencl takes its OpenCL
// device from the backend's lease: the report's backend snapshot (taken
// at the end of the run) and the --metrics file show it leased, and the
// summary names the leased device.
func TestRunFlightsDeviceOpenCLLeased(t *testing.T) {
	needOpenCL(t)
	dir := t.TempDir()
	rep, metrics := filepath.Join(dir, "r.json"), filepath.Join(dir, "m.json")
	code, _, errs := runArgs(t, "run", "flights", "--device", "opencl", "--top", "1", "--report", rep, "--metrics", metrics)
	require.Equal(t, 0, code, errs)
	assert.Regexp(t, `devices: cpu and opencl0; --device opencl: opencl0 \(.+\) leased, beside the CPU device\n`, errs)
	for _, src := range []struct {
		path      string
		inBackend bool
	}{{rep, true}, {metrics, false}} {
		leases := leaseEntries(t, src.path, src.inBackend)
		require.NotEmpty(t, leases, src.path)
		assert.Equal(t, "opencl0", leases[0].Device, src.path)
		assert.True(t, leases[0].Leased, "%s: the run holds the lease while it runs", src.path)
		for _, l := range leases[1:] {
			assert.False(t, l.Leased, "%s: one lease only: %+v", src.path, l)
		}
	}
}

// TestRunFlightsOpenCLStreamsCap: an OpenCL device opens at most
// opencl.MaxStreams streams. --device opencl with a larger --streams is a
// usage error naming the cap, before anything is leased, and the help
// states it; where --device auto lands on an OpenCL GPU with more CPU
// streams than that, the summary says how many streams each device has.
func TestRunFlightsOpenCLStreamsCap(t *testing.T) {
	over := strconv.Itoa(opencl.MaxStreams + 1)
	code, _, errs := runArgs(t, "run", "flights", "--device", "opencl", "--streams", over)
	assert.Equal(t, 2, code, errs)
	assert.Contains(t, errs, "--streams "+over+" with --device opencl: an OpenCL device opens at most "+strconv.Itoa(opencl.MaxStreams)+" streams")
	code, out, errs := runArgs(t, "run", "flights", "--help")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "an OpenCL device gets as many, at most "+strconv.Itoa(opencl.MaxStreams)+" (--device opencl refuses more)")

	needOpenCL(t)
	useDriver(t, gpuLikeKind)
	code, _, errs = runArgs(t, "run", "flights", "--device", deviceAuto, "--streams", over, "--top", "1")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "; opencl0 has "+strconv.Itoa(opencl.MaxStreams)+" streams, the most an OpenCL device opens, and cpu "+over+"\n")
	assert.Contains(t, errs, " launches on "+over+", "+strconv.Itoa(opencl.MaxStreams)+" streams of each of 2 devices (cpu, opencl0),")
	for _, o := range countingDriver.take() {
		assertClosed(t, o)
	}
}

// TestRunFlightsOpensTheLeasedDeviceOnce: where the backend leases an
// OpenCL GPU (here PoCL's device, listed as a GPU by a test driver),
// --device auto and --device opencl run on it, open it once (through the
// lease: no second device of the same hardware), close it when the run
// ends, and write the CSV --device cpu writes.
func TestRunFlightsOpensTheLeasedDeviceOnce(t *testing.T) {
	needOpenCL(t)
	useDriver(t, gpuLikeKind)
	fs, err := enumerateOpenCL(t.Context())
	require.NoError(t, err)
	dir := t.TempDir()
	cpuCSV := filepath.Join(dir, "cpu.csv")
	code, _, errs := runArgs(t, "run", "flights", "--device", "cpu", "--top", "0", "--out", cpuCSV)
	require.Equal(t, 0, code, errs)
	assert.Empty(t, countingDriver.take(), "--device cpu leases nothing")
	want, err := os.ReadFile(cpuCSV)
	require.NoError(t, err)

	for _, tc := range []struct{ flag, why string }{
		{deviceAuto, `--device auto: OpenCL GPU opencl0 \(.+\) leased\n`},
		{deviceOpenCL, `--device opencl: opencl0 \(.+\) leased, beside the CPU device\n`},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			csv, rep := filepath.Join(dir, tc.flag+".csv"), filepath.Join(dir, tc.flag+".json")
			code, _, errs := runArgs(t, "run", "flights", "--device", tc.flag, "--top", "0", "--out", csv, "--report", rep)
			opened := countingDriver.take()
			require.Equal(t, 0, code, errs)
			require.Len(t, opened, 1, "the leased device is opened once")
			assertClosed(t, opened[0])
			assert.Regexp(t, `devices: cpu and opencl0; `+tc.why, errs)
			assert.Regexp(t, `launches on \d+ streams? of each of 2 devices \(cpu, opencl0\),`, errs)
			assert.Regexp(t, `; opencl0: filter ×\d+, partial ×\d+;`, errs)
			leases := leaseEntries(t, rep, true)
			require.Len(t, leases, len(fs), "a slot per OpenCL device")
			assert.True(t, leases[0].Leased, "the run held the lease")
			got, err := os.ReadFile(csv)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
		})
	}
}

// TestRunFlightsInterruptedReleasesTheLease: a run interrupted (its
// context cancelled, as Ctrl-C does) before the claim leases nothing, and
// one interrupted once the device is leased and open stops, closes the
// device and gives the lease back; both exit with an error.
func TestRunFlightsInterruptedReleasesTheLease(t *testing.T) {
	needOpenCL(t)
	useDriver(t, gpuLikeKind)
	for _, flag := range []string{deviceAuto, deviceOpenCL} {
		t.Run(flag+" before the claim", func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			var out, errb bytes.Buffer
			code := run(ctx, []string{"run", "flights", "--device", flag, "--top", "1"}, strings.NewReader(""), &out, &errb)
			assert.Equal(t, 1, code, errb.String())
			assert.Contains(t, errb.String(), "context canceled")
			assert.Empty(t, countingDriver.take(), "nothing opened")
		})
		t.Run(flag+" once leased", func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			countingDriver.mu.Lock()
			countingDriver.onOpen = cancel
			countingDriver.mu.Unlock()
			defer func() {
				countingDriver.mu.Lock()
				countingDriver.onOpen = nil
				countingDriver.mu.Unlock()
			}()
			var out, errb bytes.Buffer
			code := run(ctx, []string{"run", "flights", "--device", flag, "--top", "1"}, strings.NewReader(""), &out, &errb)
			assert.Equal(t, 1, code, errb.String())
			assert.Contains(t, errb.String(), "context canceled")
			opened := countingDriver.take()
			require.Len(t, opened, 1, errb.String())
			assertClosed(t, opened[0])
		})
	}
}

// leaseState returns whether each slot of b is leased, in slot order.
func leaseState(b *lease.Backend) []bool {
	var out []bool
	for _, l := range b.MetricsSnapshot().Leases {
		out = append(out, l.Leased)
	}
	return out
}

// TestRunDevicesReleasesTheLease: runDevices holds the backend's lease on
// the device it runs on until the setup's release, which closes the
// device and frees the slot; a leased device the run does not use (auto:
// it lacks an extension the flights kernels need) is closed and its slot
// freed at once; an error (opencl: the same device; a cancelled claim,
// as after Ctrl-C) leaves no lease held and no device open.
func TestRunDevicesReleasesTheLease(t *testing.T) {
	needOpenCL(t)
	useDriver(t, gpuLikeKind)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name    string
		flag    string
		ctx     context.Context
		needExt string // an extension to require besides flightsExtensions
		openCL  bool   // the run uses the leased device
		opens   int
		err     string
		errIs   error
	}{
		{name: "opencl runs on the lease", flag: deviceOpenCL, openCL: true, opens: 1},
		{name: "auto runs on the lease", flag: deviceAuto, openCL: true, opens: 1},
		{name: "cpu leases nothing", flag: deviceCPU},
		{name: "auto gives back a device without the extension", flag: deviceAuto, needExt: "cl_no_such_extension", opens: 1},
		{name: "opencl fails on a device without the extension", flag: deviceOpenCL, needExt: "cl_no_such_extension", opens: 1,
			err: "lacks cl_no_such_extension, which the flights kernels need (64-bit atomics on local memory); use --device cpu"},
		{name: "opencl claim cancelled", flag: deviceOpenCL, ctx: canceled, errIs: context.Canceled},
		{name: "auto claim cancelled", flag: deviceAuto, ctx: canceled, errIs: context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needExt != "" {
				old := flightsExtensions
				flightsExtensions = append(slices.Clone(old), tc.needExt)
				defer func() { flightsExtensions = old }()
			}
			lp := planLease(tc.flag, false)
			if tc.flag == deviceCPU {
				lp.drivers = []string{gpuLikeKind} // a device to lease, which cpu leaves alone
			}
			b, err := lease.New(lp.options()...)
			require.NoError(t, err)
			defer func() {
				_, err := b.CloseAndWait(context.Background())
				assert.NoError(t, err)
			}()
			require.Positive(t, b.NumGPUs(), "the backend leases the OpenCL devices: %v", b.Notes())
			ctx := tc.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			setup, err := runDevices(ctx, b, lp, "", 2, nil)
			opened := countingDriver.take()
			assert.Len(t, opened, tc.opens, "devices opened")
			if tc.err != "" || tc.errIs != nil {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				if tc.errIs != nil {
					assert.ErrorIs(t, err, tc.errIs)
				}
				assert.NotContains(t, leaseState(b), true, "no lease held after the error")
				for _, d := range opened {
					assertClosed(t, d)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.openCL, setup.openCL)
			if tc.openCL {
				require.Len(t, setup.devs, 2)
				assert.Same(t, opened[0], setup.devs[1], "the run's OpenCL device is the one the lease opened")
				assert.Equal(t, "opencl0", setup.devs[1].ID().String())
				assert.Equal(t, 2, setup.devs[1].NumStreams(), "as many streams as the CPU device")
				assert.Equal(t, true, leaseState(b)[0], "held while the run has the device")
			} else {
				require.Len(t, setup.devs, 1)
				assert.NotContains(t, leaseState(b), true, "nothing held by a run on the CPU device alone")
				for _, d := range opened {
					assertClosed(t, d)
				}
			}
			assert.Equal(t, "cpu", setup.devs[0].ID().String())
			setup.release()
			setup.release() // idempotent
			assert.NotContains(t, leaseState(b), true, "released")
			for _, d := range setup.devs {
				assertClosed(t, d)
			}
		})
	}
}

// TestFlightsExtensionsMatchTheKernels: flightsExtensions are exactly the
// extensions the flights kernels' OpenCL C enables, so the check before a
// device is chosen asks for what the kernels need.
func TestFlightsExtensionsMatchTheKernels(t *testing.T) {
	file, err := flights.Sample()
	require.NoError(t, err)
	defer file.Close()
	src, err := kvio.OpenAuto(t.Context(), file)
	require.NoError(t, err)
	defer src.Close()
	p, err := flights.Build(src, flights.WithPartitions(2), flights.WithOpenCL())
	require.NoError(t, err)
	pragma := regexp.MustCompile(`#pragma OPENCL EXTENSION (\w+) : enable`)
	enabled := map[string]bool{}
	for _, k := range p.Graph.Kernels() {
		for _, v := range k.Variants {
			for _, m := range pragma.FindAllStringSubmatch(v.Source, -1) {
				enabled[m[1]] = true
			}
		}
	}
	require.NotEmpty(t, enabled, "the flights graph has OpenCL C that enables extensions")
	assert.ElementsMatch(t, flightsExtensions, slices.Sorted(maps.Keys(enabled)))
}

// TestRunDevicesAutoWithAnNVMLGPUNoDriverRuns: --device auto on a host
// whose backend leases an NVML GPU that no registered driver runs (no
// OpenCL driver lists it) runs on the CPU device alone, saying so in the
// devices line with Acquire's reason, and holds no lease.
func TestRunDevicesAutoWithAnNVMLGPUNoDriverRuns(t *testing.T) {
	withGPUNodes(t, "nvidia0")
	lp := planLease(deviceAuto, false)
	b, err := lease.New(append(lp.options(), lease.WithDevices([]topology.DeviceFacts{{ID: topology.GPU(0), Name: "NVIDIA H200",
		MemoryBytes: 140 << 30, UUID: "GPU-5f0c1a2b-3c4d-5e6f-7081-92a3b4c5d6e7", NUMANode: -1}}))...)
	require.NoError(t, err)
	defer func() {
		_, err := b.CloseAndWait(context.Background())
		assert.NoError(t, err)
	}()
	setup, err := runDevices(t.Context(), b, lp, "", 2, nil)
	require.NoError(t, err)
	defer setup.release()
	assert.False(t, setup.openCL)
	require.Len(t, setup.devs, 1)
	assert.Equal(t, "cpu", setup.devs[0].ID().String())
	assert.Contains(t, setup.why, "cpu; --device auto: no OpenCL GPU (gpu0 (NVIDIA H200) leased, but no registered driver runs it")
	assert.Contains(t, setup.why, "so every kernel runs on the CPU device")
	assert.NotContains(t, leaseState(b), true, "the lease is given back")
}
