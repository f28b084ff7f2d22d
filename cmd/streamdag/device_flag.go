package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/lease"

	"github.com/streamdag/streamdag/internal/cli"
)

// The values of run flights --device.
const (
	deviceAuto   = "auto"
	deviceCPU    = "cpu"
	deviceOpenCL = "opencl"
)

// openCLDriver is the kind of the driver whose devices --device opencl
// and auto lease (gpu/opencl's; a test names a driver that wraps it).
var openCLDriver = opencl.Kind

// flightsExtensions are the OpenCL extensions the flights kernels
// (examples/flights' OpenCL C) enable: 64-bit atomics on local memory
// (atom_inc, atom_add, atom_max on long) for the partial group-by.
var flightsExtensions = []string{"cl_khr_int64_base_atomics", "cl_khr_int64_extended_atomics"}

// gpuDeviceNodes are the device nodes (filepath.Glob patterns) of the
// kernel drivers through which GPUs serve OpenCL: an OpenCL GPU driver
// opens one of them, so a host with none has no OpenCL GPU, and --device
// auto then leaves the OpenCL platforms unprobed (loading an ICD such as
// PoCL's maps LLVM and Clang into the process: tens of milliseconds and
// of MiB):
//
//   - /dev/nvidia[0-9]*: NVIDIA's driver, one node per GPU (nvidiactl and
//     nvidia-uvm serve them all and come with them).
//   - /dev/dri/renderD*: DRM render nodes, one per GPU: AMD (amdgpu),
//     Intel (i915, xe; Intel's compute runtime), and Mesa's OpenCL
//     (rusticl) on any DRM driver.
//   - /dev/kfd: AMD ROCm's compute interface, which ROCm's OpenCL opens
//     beside the render node.
//
// Tests point it elsewhere.
var gpuDeviceNodes = []string{"/dev/nvidia[0-9]*", "/dev/dri/renderD*", "/dev/kfd"}

// gpuDeviceNode returns the first path that one of gpuDeviceNodes
// matches, in that order, or "" when none does (a pattern that does not
// parse matches nothing). It reads the directories the patterns name and
// opens nothing.
func gpuDeviceNode() string {
	for _, p := range gpuDeviceNodes {
		if m, _ := filepath.Glob(p); len(m) > 0 {
			return m[0]
		}
	}
	return ""
}

// leasePlan is what a run with --device flag asks the backend for.
type leasePlan struct {
	flag string
	// drivers are the drivers the backend asks for devices (never nil:
	// lease.WithDrivers of none asks none).
	drivers []string
	// leaseTypes are the types of the drivers' devices it leases (nil:
	// the backend's default, GPUs).
	leaseTypes []string
	// openCLOnly is true when the backend leases no NVML GPU: then source
	// says why it owns none.
	openCLOnly bool
	source     string
	// notProbed says why the OpenCL driver is not asked for devices
	// where --device auto would ask it ("no GPU device node (…)"); ""
	// otherwise.
	notProbed string
}

// planLease is the lease plan of a run with --device flag (sim: with
// --topology): which devices its backend leases.
//
//   - cpu, and simulated GPUs: no driver (an empty, non-nil Drivers: no
//     driver is asked for devices and no OpenCL library is loaded); the
//     backend owns the NVML GPUs but the run leases nothing.
//   - opencl: the OpenCL driver's devices of any type (a GPU of any
//     vendor, PoCL's CPU device) and nothing else, so a claim never gets
//     an NVML GPU that no driver runs.
//   - auto: the NVML GPUs and the OpenCL driver's GPUs; a GPU the OpenCL
//     driver lists too is run through it. On a host with no GPU device
//     node (gpuDeviceNodes) there is no OpenCL GPU to find: the OpenCL
//     driver is not asked (nothing loaded) and notProbed says so.
func planLease(flag string, sim bool) leasePlan {
	switch {
	case sim || flag == deviceCPU:
		return leasePlan{flag: flag, drivers: []string{}}
	case flag == deviceOpenCL:
		return leasePlan{flag: flag, drivers: []string{openCLDriver}, leaseTypes: []string{"gpu", "cpu"},
			openCLOnly: true, source: "--device opencl leases OpenCL devices only"}
	case flag == deviceAuto && gpuDeviceNode() == "":
		return leasePlan{flag: flag, drivers: []string{},
			notProbed: "no GPU device node (" + strings.Join(gpuDeviceNodes, ", ") + ")"}
	default:
		return leasePlan{flag: flag, drivers: []string{openCLDriver}}
	}
}

// options are the lease options of the plan's drivers, lease types and
// source; the GPUs (for a plan that is not openCLOnly) are the caller's.
func (lp leasePlan) options() []lease.Option {
	opts := []lease.Option{lease.WithDrivers(lp.drivers...)}
	if lp.leaseTypes != nil {
		opts = append(opts, lease.WithLeaseTypes(lp.leaseTypes...))
	}
	if lp.source != "" {
		opts = append(opts, lease.WithSource(lp.source))
	}
	return opts
}

// leased is what the backend's Acquire gave a run with --device opencl or
// auto, as chooseDevice judges it.
type leased struct {
	held  bool         // a lease is held: the device is the leased one
	id    string       // the device's ID: "opencl0"
	info  *opencl.Info // the device's OpenCL description; nil when it is no OpenCL device
	why   string       // Acquire's Why
	slots int          // the devices the backend leases (Backend.NumGPUs)
	notes []string     // the backend's Notes (Backend.Notes)
	// notProbed is the lease plan's notProbed: why the OpenCL driver was
	// not asked for devices ("" when it was).
	notProbed string
}

// deviceChoice is what --device resolved to: the CPU device alone, or
// the CPU device plus the leased OpenCL device (openCL), and why.
type deviceChoice struct {
	openCL bool
	why    string
}

// chooseDevice resolves --device flag (opencl or auto) over what the
// backend leased (l). The leased device is used when it is an OpenCL
// device that has every extension of flightsExtensions. Otherwise auto
// runs every kernel on the CPU device and says why (no GPU leased, and
// OpenCL not probed when l.notProbed says so; or Acquire's reason such as an NVML GPU no driver runs, a device that is
// no OpenCL device, the extensions it lacks), and opencl is an error that
// says the same and what to do. cpu resolves to the CPU device without
// looking at l.
func chooseDevice(flag string, l leased) (deviceChoice, error) {
	var lacks string // why the leased device cannot run the flights kernels
	if l.held {
		switch {
		case l.info == nil:
			lacks = l.id + " is no OpenCL device: the flights kernels have OpenCL C only"
		default:
			var missing []string
			for _, e := range flightsExtensions {
				if !l.info.HasExtension(e) {
					missing = append(missing, e)
				}
			}
			if len(missing) > 0 {
				lacks = fmt.Sprintf("%s (%s, %s, %s) lacks %s, which the flights kernels need (64-bit atomics on local memory)",
					l.id, l.info.Name, l.info.Type, l.info.Platform, strings.Join(missing, " and "))
			}
		}
	}
	switch flag {
	case deviceCPU:
		return deviceChoice{why: "--device cpu"}, nil
	case deviceAuto:
		switch {
		case !l.held && l.notProbed != "":
			return deviceChoice{why: "--device auto: " + l.notProbed + ": OpenCL not probed; running on the CPU device"}, nil
		case !l.held:
			return deviceChoice{why: "--device auto: no OpenCL GPU (" + l.why + "), so every kernel runs on the CPU device"}, nil
		case lacks != "":
			return deviceChoice{why: "--device auto: " + lacks + ", so every kernel runs on the CPU device"}, nil
		}
		return deviceChoice{openCL: true, why: "--device auto: OpenCL GPU " + l.why}, nil
	case deviceOpenCL:
		switch {
		case !l.held:
			reason := l.why
			if l.slots == 0 {
				reason = noteText(l.notes)
			}
			return deviceChoice{}, fmt.Errorf("--device opencl: no OpenCL device: looked for libOpenCL.so.1 and the platforms its ICD loader lists (/etc/OpenCL/vendors): %s; "+
				"install one, e.g. apt-get install pocl-opencl-icd ocl-icd-libopencl1 (PoCL: OpenCL on the CPU cores), or use --device cpu", reason)
		case lacks != "":
			return deviceChoice{}, fmt.Errorf("--device opencl: %s; use --device cpu", lacks)
		}
		return deviceChoice{openCL: true, why: "--device opencl: " + l.why + ", beside the CPU device"}, nil
	}
	return deviceChoice{}, cli.Usagef("--device %s: want cpu, opencl or auto", flag)
}

// noteText joins the backend's notes of the OpenCL driver, each without
// the driver's kind ("opencl: no platform …"), or says there was none.
func noteText(notes []string) string {
	out := make([]string, 0, len(notes))
	for _, n := range notes {
		out = append(out, strings.TrimPrefix(n, openCLDriver+": "))
	}
	if len(out) == 0 {
		return "no OpenCL device"
	}
	return strings.Join(out, "; ")
}

// deviceSummary is the run summary's line on a run with an OpenCL
// device: which kernels ran where, and the copies between the devices.
func deviceSummary(rep *exec.Report) string {
	n, bytes := copiedBytes(rep)
	return fmt.Sprintf("kernels: %s; %s between the devices, %.1f MB",
		kernelsByDevice(rep), plural(n, "copy"), float64(bytes)/1e6)
}

// kernelsByDevice says which kernels ran on which device, one entry per
// device in the report's order: "opencl0: filter ×22, partial ×22". A
// kernel name's partition index is dropped ("filter[3]" counts as filter).
func kernelsByDevice(rep *exec.Report) string {
	type count struct {
		name string
		n    int
	}
	byDev := map[string][]count{}
	var devs []string
	for _, l := range rep.Launches() {
		if l.Status != exec.StatusOK || strings.HasPrefix(l.Kernel, "copy ") {
			continue
		}
		d := l.Device.String()
		if _, ok := byDev[d]; !ok {
			devs = append(devs, d)
		}
		name, _, _ := strings.Cut(l.Kernel, "[")
		cs := byDev[d]
		if i := slices.IndexFunc(cs, func(c count) bool { return c.name == name }); i >= 0 {
			cs[i].n++
		} else {
			cs = append(cs, count{name, 1})
		}
		byDev[d] = cs
	}
	parts := make([]string, 0, len(devs))
	for _, d := range devs {
		var ks []string
		for _, c := range byDev[d] {
			if c.n == 1 {
				ks = append(ks, c.name)
			} else {
				ks = append(ks, fmt.Sprintf("%s ×%d", c.name, c.n))
			}
		}
		parts = append(parts, d+": "+strings.Join(ks, ", "))
	}
	return strings.Join(parts, "; ")
}

// copiedBytes sums the bytes the run's copies moved and counts them.
func copiedBytes(rep *exec.Report) (n int, bytes int64) {
	for _, c := range rep.Copies {
		n++
		bytes += c.Bytes
	}
	return n, bytes
}
