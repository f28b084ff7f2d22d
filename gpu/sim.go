package gpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/streamdag/streamdag/topology"
)

// SimSet is a set of simulated GPUs: one Device per GPU of a machine's
// topology, whose streams are real CPU streams (worker goroutines) of one
// shared runtime, so events recorded on one simulated GPU can be waited on
// by another, as CUDA events can across devices. A simulated GPU runs its
// kernels on the host: it models placement, per-device memory and
// transfers (the executor records each cross-device copy's modeled time
// from the topology), never GPU speed, and never sleeps to pretend.
//
// The zero value is not usable; call NewSim. Close stops every stream.
type SimSet struct {
	rt   *cpuDevice
	devs []*simDevice
}

// NewSim returns one simulated GPU per entry of gpus (their IDs and facts,
// e.g. topology.Topology.GPUs()), each with streamsPerDevice streams
// (1..MaxCPUStreams in all). Errors: no GPUs, a non-GPU or duplicate ID,
// a bad stream count.
func NewSim(gpus []topology.Device, streamsPerDevice int) (*SimSet, error) {
	if len(gpus) == 0 {
		return nil, errors.New("gpu: NewSim: no GPUs to simulate")
	}
	seen := map[topology.DeviceID]bool{}
	for _, g := range gpus {
		if g.ID.Kind != topology.KindGPU || seen[g.ID] {
			return nil, fmt.Errorf("gpu: NewSim: %s is not a distinct GPU", g.ID)
		}
		seen[g.ID] = true
	}
	if streamsPerDevice < 1 || streamsPerDevice*len(gpus) > MaxCPUStreams {
		return nil, fmt.Errorf("gpu: NewSim: %d streams per device × %d GPUs: want 1 to %d streams in all",
			streamsPerDevice, len(gpus), MaxCPUStreams)
	}
	rt, err := NewCPU(WithStreams(streamsPerDevice * len(gpus)))
	if err != nil {
		return nil, err
	}
	s := &SimSet{rt: rt.(*cpuDevice)}
	for i, g := range gpus {
		d := &simDevice{info: g}
		for j := range streamsPerDevice {
			d.streams = append(d.streams, &simStream{cpuStream: s.rt.streams[i*streamsPerDevice+j], dev: g.ID, idx: j})
		}
		s.devs = append(s.devs, d)
	}
	return s, nil
}

// Devices returns the simulated GPUs in the order NewSim was given them.
func (s *SimSet) Devices() []Device {
	out := make([]Device, len(s.devs))
	for i, d := range s.devs {
		out[i] = d
	}
	return out
}

// Close drains and stops every stream of every simulated GPU. It is
// idempotent.
func (s *SimSet) Close() error { return s.rt.Close() }

// simDevice is one simulated GPU: a view of some streams of the shared
// runtime.
type simDevice struct {
	info    topology.Device
	streams []*simStream
}

var (
	_ Device = (*simDevice)(nil)
	_ Stream = (*simStream)(nil)
)

func (d *simDevice) ID() topology.DeviceID { return d.info.ID }
func (d *simDevice) Info() topology.Device { return d.info }
func (d *simDevice) NumStreams() int       { return len(d.streams) }
func (d *simDevice) String() string        { return d.info.ID.String() + " (simulated)" }

// Stream returns stream i; it panics when i is out of range.
func (d *simDevice) Stream(i int) Stream {
	if i < 0 || i >= len(d.streams) {
		panic(fmt.Sprintf("gpu: %v stream %d out of range [0, %d)", d, i, len(d.streams)))
	}
	return d.streams[i]
}

// Close waits for the work queued on the device's streams; the streams
// stop with SimSet.Close.
func (d *simDevice) Close() error {
	for _, s := range d.streams {
		_ = s.cpuStream.Synchronize(context.Background())
	}
	return nil
}

// simStream is a CPU stream that says it belongs to a simulated GPU.
type simStream struct {
	*cpuStream
	dev topology.DeviceID
	idx int
}

func (s *simStream) Device() topology.DeviceID { return s.dev }
func (s *simStream) Index() int                { return s.idx }
func (s *simStream) String() string            { return fmt.Sprintf("%s stream %d (simulated)", s.dev, s.idx) }
