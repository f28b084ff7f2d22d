package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	_ "github.com/streamdag/streamdag/gpu/cpu" // registers the CPU driver backend.Acquire opens
	"github.com/streamdag/streamdag/gpu/nvml"
	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/lease"
	"github.com/streamdag/streamdag/topology"

	"github.com/streamdag/streamdag/internal/cli"
)

// defaultSimStreams is the stream count of each simulated GPU when
// --streams is not given.
const defaultSimStreams = 2

// runSetup is the devices a run executes on and how to give them back.
type runSetup struct {
	devs []gpu.Device
	// topo is the simulated machine's topology (--topology), else nil.
	topo *topology.Topology
	// why says what the run runs on, for the summary's devices line.
	why string
	// openCL: the last of devs is the leased OpenCL device, where the
	// flights kernels with OpenCL C run.
	openCL bool
	// release closes the devices and releases the lease; idempotent.
	release func()
}

// newBackend builds the run's lease backend as lp says, over this host's
// GPUs as NVML's Discover finds them (unless lp is openCLOnly), with
// NVML's health check when NVML answered, so a GPU NVML reports lost
// after discovery is never leased, and with the NVML status as the
// reason for no GPU (unless lp gives its own source). On a host
// with no device to lease the backend owns none, and Acquire runs on the
// CPU device. Errors are lease.New's (lease.ErrBackendAlreadyLive while
// another backend of the process is live or draining). The caller closes
// the backend (CloseAndWait).
func newBackend(ctx context.Context, lp leasePlan) (*lease.Backend, error) {
	inv, err := nvml.Discover(ctx)
	if err != nil {
		return nil, err
	}
	opts := []lease.Option{lease.WithSource(inv.NVML.String())} // lp's source, when it has one, replaces it
	if !lp.openCLOnly {
		opts = append(opts, lease.WithDevices(inv.Devices))
	}
	if inv.NVML.Available {
		opts = append(opts, lease.WithHealthCheck(nvml.HealthCheck(nil)))
	}
	return lease.New(append(opts, lp.options()...)...)
}

// runDevices gives a run its devices; every device but the CPU device
// comes from the backend's lease, opened once, by the driver that found
// it. plan is the lease plan the backend was made with (planLease). With
// --topology (topoSpec), the run gets one simulated GPU per GPU
// of that machine (gpu.Open of sim.Kind) with the machine's topology for
// placement, and leases nothing; loss (nil: none) makes one of those GPUs
// report its loss after a share of its own launches (sim.WithLoss, as the
// driver's settings), and naming a device that is not one of them is a
// usage error. Otherwise, with --device plan.flag:
//
//   - cpu: the CPU device with streams streams; nothing leased.
//   - opencl, auto: the CPU device plus the device the backend leases
//     (Backend.Acquire; see planLease for what each flag leases),
//     opened with as many streams as the CPU device has (at most
//     opencl.MaxStreams: when it has fewer, the setup's why says how
//     many each device has), when chooseDevice takes it. When auto does
//     not (no device leased, or one the flights kernels cannot run on),
//     the lease is released at once and the run has the CPU device
//     alone; when opencl does not, the error is chooseDevice's and
//     nothing is left held.
//
// The setup's release frees everything it took: call it when the run
// ends, on every path. Errors: ctx.Err() while claiming (nothing held),
// the CPU driver's, chooseDevice's, a bad --topology, a loss of no GPU of
// it.
func runDevices(ctx context.Context, backend *lease.Backend, plan leasePlan, topoSpec string, streams int, loss *lossSpec) (*runSetup, error) {
	flag := plan.flag
	if topoSpec == "" {
		var opts []gpu.Option
		if streams != 0 {
			opts = append(opts, gpu.WithStreams(streams)) // else the CPU driver's default
		}
		set, err := gpu.Open(ctx, "cpu", opts...)
		if err != nil {
			return nil, err
		}
		cpuDev := set.Devices()[0]
		rs := &runSetup{devs: []gpu.Device{cpuDev}, release: func() { _ = set.Close() }}
		if flag == deviceCPU {
			c, err := chooseDevice(flag, leased{})
			if err != nil {
				rs.release()
				return nil, err
			}
			rs.why = cpuDev.ID().String() + "; " + c.why
			return rs, nil
		}
		acq, err := backend.Acquire(ctx, gpu.WithStreams(min(cpuDev.NumStreams(), opencl.MaxStreams)))
		if err != nil {
			rs.release()
			return nil, err
		}
		l := leased{held: acq.Claim != nil, id: acq.Device.ID().String(), why: acq.Why,
			slots: backend.NumGPUs(), notes: backend.Notes(), notProbed: plan.notProbed}
		if info, ok := opencl.InfoOf(acq.Device); ok && l.held {
			l.info = &info
		}
		c, err := chooseDevice(flag, l)
		if err != nil || !c.openCL {
			acq.Release() // its CPU device, or the leased device the run does not use, and the lease
		}
		if err != nil {
			rs.release()
			return nil, err
		}
		if !c.openCL {
			rs.why = cpuDev.ID().String() + "; " + c.why
			return rs, nil
		}
		rs.devs = append(rs.devs, acq.Device)
		rs.openCL = true
		rs.why = cpuDev.ID().String() + " and " + acq.Device.ID().String() + "; " + c.why
		if n := acq.Device.NumStreams(); n < cpuDev.NumStreams() {
			rs.why += fmt.Sprintf("; %s has %d streams, the most an OpenCL device opens, and %s %d",
				acq.Device.ID(), n, cpuDev.ID(), cpuDev.NumStreams())
		}
		rs.release = func() {
			acq.Release()
			_ = set.Close()
		}
		return rs, nil
	}
	m, err := loadMachine(topoSpec)
	if err != nil {
		return nil, fmt.Errorf("--topology: %w", err)
	}
	var opts []topology.Option
	if m.spec != nil {
		opts = append(opts, topology.WithGPUSpec(*m.spec))
	}
	topo, err := topology.New(m.facts, opts...)
	if err != nil {
		return nil, fmt.Errorf("--topology %s: %w", topoSpec, err)
	}
	gpus := topo.GPUs()
	for i := range gpus {
		if gpus[i].MemoryBytes == 0 {
			gpus[i].MemoryBytes = m.memory
		}
	}
	if streams == 0 {
		streams = defaultSimStreams
	}
	var simOpts []sim.Option
	if loss != nil {
		ids := make([]string, len(gpus))
		for i, g := range gpus {
			ids[i] = g.ID.String()
		}
		if !slices.Contains(ids, loss.dev.String()) {
			return nil, cli.Usagef("--lose-device %s: %s is not a device of %s (%s)", loss.flag, loss.dev, topoSpec, strings.Join(ids, ", "))
		}
		simOpts = append(simOpts, sim.WithLoss(loss.dev, loss.after))
	}
	set, err := gpu.Open(ctx, sim.Kind, gpu.WithStreams(streams), sim.WithSimulation(gpus, simOpts...))
	if err != nil {
		return nil, fmt.Errorf("--topology %s: %w", topoSpec, err)
	}
	spec := topology.DefaultSpec.Name + " (default model)"
	if m.spec != nil {
		spec = m.spec.Name
	}
	why := fmt.Sprintf("%d simulated %s GPUs of %s; kernels run on CPU streams, copies between GPUs are real copies timed by the topology model",
		len(gpus), spec, m.source)
	return &runSetup{devs: set.Devices(), topo: topo, why: why, release: func() { _ = set.Close() }}, nil
}

// placementSummary is one line on the placement and copies of a
// multi-device run.
func placementSummary(p *exec.Plan, rep *exec.Report) string {
	used := usedDevices(p)
	var links []string
	for k, n := range rep.BytesByLink {
		links = append(links, fmt.Sprintf("%s %.1f MB", k, float64(n)/1e6))
	}
	slices.Sort(links)
	via := 0
	for _, c := range rep.Copies {
		if c.ViaHost {
			via++
		}
	}
	var modeled time.Duration
	for _, c := range rep.Copies {
		modeled += c.Modeled
	}
	copies := plural(len(rep.Copies), "copy")
	if rep.Lost != nil {
		// The makespan is the plan's; the copies are the run's, the
		// recovery's included.
		copies += " over both phases"
	}
	if len(links) > 0 {
		copies += " (" + strings.Join(links, ", ") + ")"
	}
	return fmt.Sprintf("placement %s: %d of %d GPUs used, modeled makespan %s, %s, %d through the host, modeled copy time %s",
		rep.Placement, len(used), len(p.Devices()), fmtDuration(rep.Makespan), copies, via, fmtDuration(modeled))
}

// usedDevices returns the devices p places a kernel on, in p's order.
func usedDevices(p *exec.Plan) []topology.DeviceID {
	devs := p.Devices()
	used := make([]bool, len(devs))
	for _, d := range p.Placement().Device {
		used[d] = true
	}
	var out []topology.DeviceID
	for i, id := range devs {
		if used[i] {
			out = append(out, id)
		}
	}
	return out
}

// devicesLabel names the devices a run used: "cpu", or "each of 6 devices
// (gpu0, gpu1, gpu2, gpu4, gpu5, gpu7)".
func devicesLabel(ids []topology.DeviceID) string {
	if len(ids) == 1 {
		return ids[0].String()
	}
	names := make([]string, len(ids))
	for i, d := range ids {
		names[i] = d.String()
	}
	return fmt.Sprintf("each of %d devices (%s)", len(ids), strings.Join(names, ", "))
}

// lossSummary says what a run that lost a device did about it.
func lossSummary(rep *exec.Report) string {
	var moves []string
	for _, m := range rep.Migrations {
		moves = append(moves, fmt.Sprintf("%s %s→%s", m.Kernel, m.From, m.To))
	}
	reruns := "none"
	if len(rep.Reruns) > 0 {
		reruns = strings.Join(rep.Reruns, ", ")
	}
	return fmt.Sprintf("lost %s: %s moved off it (%s); re-run because their output was lost with it: %s",
		*rep.Lost, plural(len(rep.Migrations), "kernel"), strings.Join(moves, ", "), reruns)
}

// lossSpec is what --lose-device (flag, as given) asks for: simulated GPU
// dev reports its loss after the fraction after (0–1) of its own launches
// (sim.WithLoss).
type lossSpec struct {
	flag  string
	dev   topology.DeviceID
	after float64
}

// checkPlan refuses (a usage error) a loss of a GPU plan puts no kernel
// on: no launch would ever learn of it, and the run would go as without
// the flag.
func (l lossSpec) checkPlan(plan *exec.Plan) error {
	used := usedDevices(plan)
	if slices.Contains(used, l.dev) {
		return nil
	}
	names := make([]string, len(used))
	for i, id := range used {
		names[i] = id.String()
	}
	return cli.Usagef("--lose-device %s: the placement puts no kernel on %s, so its loss would change nothing (it uses %s)",
		l.flag, l.dev, strings.Join(names, ", "))
}

// parseLoss parses --lose-device DEVICE@P% (or DEVICE@F with F a fraction
// 0–1); every error is a usage error that says what to write.
func parseLoss(s string) (lossSpec, error) {
	dev, at, ok := strings.Cut(s, "@")
	if !ok {
		return lossSpec{}, cli.Usagef("--lose-device %s: want DEVICE@PERCENT, e.g. gpu3@50%%", s)
	}
	id, err := topology.ParseDeviceID(dev)
	if err != nil {
		return lossSpec{}, cli.Usagef("--lose-device %s: %w", s, err)
	}
	pct, isPct := strings.CutSuffix(at, "%")
	f, err := strconv.ParseFloat(pct, 64)
	if !isPct && err == nil && f > 1 && f <= 100 {
		return lossSpec{}, cli.Usagef("--lose-device %s: the point %s has no %%: write %s@%s%% (a percentage of the launches) or a fraction 0–1", s, at, dev, at)
	}
	if isPct {
		f /= 100
	}
	if err != nil || math.IsNaN(f) || f < 0 || f > 1 {
		return lossSpec{}, cli.Usagef("--lose-device %s: the point must be 0–100%% of the device's launches", s)
	}
	return lossSpec{flag: s, dev: id, after: f}, nil
}
