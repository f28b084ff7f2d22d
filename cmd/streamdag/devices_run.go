package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	_ "github.com/streamdag/streamdag/gpu/cpu" // registers the CPU driver backend.Acquire opens
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/topology"
)

// defaultSimStreams is the stream count of each simulated GPU when
// --streams is not given.
const defaultSimStreams = 2

// runDevices gives a run its devices. With no --topology, they come from
// the backend (gpu.Backend.Acquire): the CPU device with the reason no
// device is leased, or the CPU device (for the kernels with host code
// only) plus the leased device opened by its driver (an OpenCL GPU, an
// NVIDIA GPU through its OpenCL driver). With --topology, the run gets one
// simulated GPU per GPU of that machine (sim.New), with the machine's
// topology for placement. release frees what it took; why says what the
// run runs on.
func runDevices(ctx context.Context, backend *gpu.Backend, topoSpec string, streams int) (
	devs []gpu.Device, topo *topology.Topology, why string, release func(), err error) {
	if topoSpec == "" {
		acq, err := backend.Acquire(ctx, gpu.Config{Streams: streams})
		if err != nil {
			return nil, nil, "", nil, err
		}
		if acq.Lease == nil {
			return []gpu.Device{acq.Device}, nil, acq.Device.ID().String() + ": " + acq.Why, acq.Release, nil
		}
		set, err := gpu.Open(ctx, "cpu", gpu.Config{Streams: streams})
		if err != nil {
			acq.Release()
			return nil, nil, "", nil, err
		}
		release := func() {
			_ = set.Close()
			acq.Release()
		}
		return []gpu.Device{set.Devices()[0], acq.Device}, nil, "cpu and " + acq.Why, release, nil
	}
	m, err := loadMachine(topoSpec)
	if err != nil {
		return nil, nil, "", nil, fmt.Errorf("--topology: %w", err)
	}
	var opts []topology.Option
	if m.spec != nil {
		opts = append(opts, topology.WithGPUSpec(*m.spec))
	}
	topo, err = topology.New(m.facts, opts...)
	if err != nil {
		return nil, nil, "", nil, fmt.Errorf("--topology %s: %w", topoSpec, err)
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
	set, err := sim.New(gpus, streams)
	if err != nil {
		return nil, nil, "", nil, fmt.Errorf("--topology %s: %w", topoSpec, err)
	}
	spec := topology.DefaultSpec.Name + " (default model)"
	if m.spec != nil {
		spec = m.spec.Name
	}
	why = fmt.Sprintf("%d simulated %s GPUs of %s; kernels run on CPU streams, copies between GPUs are real copies timed by the topology model",
		len(gpus), spec, m.source)
	return set.Devices(), topo, why, func() { _ = set.Close() }, nil
}

// placementSummary is one line on the placement and copies of a
// multi-device run.
func placementSummary(p *exec.Plan, rep *exec.Report) string {
	used := map[int]bool{}
	for _, d := range p.Placement().Device {
		used[d] = true
	}
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
	return fmt.Sprintf("placement %s: %d of %d GPUs used, modeled makespan %s, %s (%s), %d through the host, modeled copy time %s",
		rep.Placement, len(used), len(p.Devices()), fmtDuration(rep.Makespan), copies,
		strings.Join(links, ", "), via, fmtDuration(modeled))
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
