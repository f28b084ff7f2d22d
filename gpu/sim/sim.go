package sim

import (
	"context"
	"errors"
	"fmt"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/topology"
)

// set is a set of simulated GPUs: one Device per GPU of a machine's
// topology, whose streams are real CPU streams (worker goroutines) of one
// shared runtime, so events recorded on one simulated GPU can be waited on
// by another, as CUDA events can across devices. A simulated GPU runs its
// kernels on the host: it models placement, per-device memory and
// transfers (the executor records each cross-device copy's modeled time
// from the topology), never GPU speed, and never sleeps to pretend.
//
// The zero value is not usable; call New. Close stops every stream.
type set struct {
	rt   gpu.Device
	devs []*simDevice
}

var _ gpu.Set = (*set)(nil)

// New returns a gpu.Set of simulated GPUs (as the package describes
// them), one per entry of gpus (their IDs and facts, e.g.
// topology.Topology.GPUs()), each with streamsPerDevice streams
// (1..cpu.MaxStreams in all); its Close stops every stream. Errors: no GPUs, a non-GPU or duplicate ID,
// a bad stream count.
func New(gpus []topology.DeviceFacts, streamsPerDevice int) (gpu.Set, error) {
	if len(gpus) == 0 {
		return nil, errors.New("sim: New: no GPUs to simulate")
	}
	seen := map[topology.DeviceID]bool{}
	for _, g := range gpus {
		if g.ID.Kind != topology.KindGPU || seen[g.ID] {
			return nil, fmt.Errorf("sim: New: %s is not a distinct GPU", g.ID)
		}
		seen[g.ID] = true
	}
	if streamsPerDevice < 1 || streamsPerDevice*len(gpus) > cpu.MaxStreams {
		return nil, fmt.Errorf("sim: New: %d streams per device × %d GPUs: want 1 to %d streams in all",
			streamsPerDevice, len(gpus), cpu.MaxStreams)
	}
	rt, err := cpu.New(cpu.WithStreams(streamsPerDevice * len(gpus)))
	if err != nil {
		return nil, err
	}
	s := &set{rt: rt}
	for i, g := range gpus {
		d := &simDevice{info: g}
		for j := range streamsPerDevice {
			d.streams = append(d.streams, &simStream{Stream: rt.Stream(i*streamsPerDevice + j), dev: g.ID, idx: j})
		}
		s.devs = append(s.devs, d)
	}
	return s, nil
}

// Devices returns the simulated GPUs in the order New was given them.
func (s *set) Devices() []gpu.Device {
	out := make([]gpu.Device, len(s.devs))
	for i, d := range s.devs {
		out[i] = d
	}
	return out
}

// Close drains and stops every stream of every simulated GPU. It is
// idempotent.
func (s *set) Close() error { return s.rt.Close() }

// simDevice is one simulated GPU: a view of some streams of the shared
// runtime.
type simDevice struct {
	info    topology.DeviceFacts
	streams []*simStream
}

var (
	_ gpu.Device = (*simDevice)(nil)
	_ gpu.Stream = (*simStream)(nil)
)

func (d *simDevice) ID() topology.DeviceID      { return d.info.ID }
func (d *simDevice) Kind() string               { return Kind }
func (d *simDevice) Info() topology.DeviceFacts { return d.info }
func (d *simDevice) NumStreams() int            { return len(d.streams) }
func (d *simDevice) String() string             { return d.info.ID.String() + " (simulated)" }

// Stream returns stream i; it panics when i is out of range.
func (d *simDevice) Stream(i int) gpu.Stream {
	if i < 0 || i >= len(d.streams) {
		panic(fmt.Sprintf("sim: %v stream %d out of range [0, %d)", d, i, len(d.streams)))
	}
	return d.streams[i]
}

// Close waits for the work queued on the device's streams; the streams
// stop with the Close of the gpu.Set New returned.
func (d *simDevice) Close() error {
	for _, s := range d.streams {
		_ = s.Stream.Synchronize(context.Background())
	}
	return nil
}

// simStream is a CPU stream that says it belongs to a simulated GPU.
type simStream struct {
	gpu.Stream // a stream of the shared CPU runtime
	dev        topology.DeviceID
	idx        int
}

func (s *simStream) Device() topology.DeviceID { return s.dev }
func (s *simStream) Index() int                { return s.idx }
func (s *simStream) String() string            { return fmt.Sprintf("%s stream %d (simulated)", s.dev, s.idx) }

// Kind is the driver kind of simulated GPUs: importing this package
// registers its driver under Kind, so gpu.Open(ctx, sim.Kind, cfg)
// returns New(cfg.GPUs, cfg.Streams) as a gpu.Set (cfg.Streams 0 means 1
// stream per simulated GPU).
const Kind = "sim"

func init() { gpu.Register(Kind, driver{}) }

// driver opens simulated GPUs for gpu.Open.
type driver struct{}

func (driver) Open(_ context.Context, cfg gpu.Config) (gpu.Set, error) {
	streams := cfg.Streams
	if streams == 0 {
		streams = 1
	}
	s, err := New(cfg.GPUs, streams)
	if err != nil {
		return nil, err
	}
	return s, nil
}
