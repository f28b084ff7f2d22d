package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

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

// Option configures the set of simulated GPUs New makes.
type Option func(*options) error

type options struct {
	streams int // per simulated GPU
	loss    map[topology.DeviceID]lossAt
}

// WithStreams sets the number of streams of each simulated GPU, n in
// [1, cpu.MaxStreams] (default 1); New also wants n × the number of GPUs
// within cpu.MaxStreams. An n outside [1, cpu.MaxStreams] makes New fail
// with an error naming n.
func WithStreams(n int) Option {
	return func(o *options) error {
		if n < 1 || n > cpu.MaxStreams {
			return fmt.Errorf("sim: WithStreams(%d): want 1 to %d streams per device", n, cpu.MaxStreams)
		}
		o.streams = n
		return nil
	}
}

// lossAt is when a simulated GPU is lost: once frac of the launches queued
// on it have completed (frac ≥ 0), or once n have (n ≥ 1; frac < 0).
type lossAt struct {
	frac float64
	n    uint64
}

// WithLoss makes simulated GPU dev report itself lost once the fraction
// after (0 to 1) of the launches queued on it as lists (gpu.Lister) have
// completed: at the first launch of its streams that brings the count of
// its completed launches to at least after × the launches queued on it so
// far (0: before its first launch). From then on the device is lost for good:
// every publish of a list returns a *gpu.LostError (matching
// gpu.ErrDeviceLost), so the list runs nothing more; its streams still
// take lists (gpu.Lister), whose first publish answers the loss, and
// refuse host tasks with it. It is for tests and demos of recovery
// (`streamdag run --lose-device gpu3@50%`). Errors (from New): dev not
// among the GPUs, after outside [0, 1].
func WithLoss(dev topology.DeviceID, after float64) Option {
	return func(o *options) error {
		if !(after >= 0 && after <= 1) {
			return fmt.Errorf("sim: WithLoss(%s, %v): the fraction must be in [0, 1]", dev, after)
		}
		o.lose(dev, lossAt{frac: after})
		return nil
	}
}

// WithLossAfter makes simulated GPU dev report itself lost once n (≥ 1)
// launches queued on it as lists have completed, as WithLoss does.
func WithLossAfter(dev topology.DeviceID, n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("sim: WithLossAfter(%s, %d): want at least 1 launch", dev, n)
		}
		o.lose(dev, lossAt{frac: -1, n: uint64(n)})
		return nil
	}
}

func (o *options) lose(dev topology.DeviceID, at lossAt) {
	if o.loss == nil {
		o.loss = map[topology.DeviceID]lossAt{}
	}
	o.loss[dev] = at
}

// New returns a gpu.Set of simulated GPUs (as the package describes
// them), one per entry of gpus (their IDs and facts, e.g.
// topology.Topology.GPUs()), each with WithStreams' streams (default 1;
// at most cpu.MaxStreams in all); its Close stops every stream. Errors: no
// GPUs, a non-GPU or duplicate ID, more than cpu.MaxStreams streams in
// all, a bad option or one naming a GPU not in gpus.
func New(gpus []topology.DeviceFacts, opts ...Option) (gpu.Set, error) {
	o := options{streams: 1}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
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
	for dev := range o.loss {
		if !seen[dev] {
			return nil, fmt.Errorf("sim: New: a loss of %s, which is not among the %d GPUs", dev, len(gpus))
		}
	}
	streamsPerDevice := o.streams
	if streamsPerDevice*len(gpus) > cpu.MaxStreams {
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
		if at, ok := o.loss[g.ID]; ok {
			d.loss = &loss{at: at}
		}
		for j := range streamsPerDevice {
			d.streams = append(d.streams, &simStream{Lister: rt.Stream(i*streamsPerDevice + j).(gpu.Lister), d: d, dev: g.ID, idx: j})
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
	loss    *loss // nil: never lost
}

var (
	_ gpu.Device = (*simDevice)(nil)
	_ gpu.Lister = (*simStream)(nil)
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
		_ = s.Lister.Synchronize(context.Background())
	}
	return nil
}

// simStream is a CPU stream that says it belongs to a simulated GPU.
type simStream struct {
	gpu.Lister // a stream of the shared CPU runtime
	d          *simDevice
	dev        topology.DeviceID
	idx        int
}

func (s *simStream) Device() topology.DeviceID { return s.dev }
func (s *simStream) Index() int                { return s.idx }
func (s *simStream) String() string            { return fmt.Sprintf("%s stream %d (simulated)", s.dev, s.idx) }

// Kind is the driver kind of simulated GPUs: importing this package
// registers its driver under Kind, so gpu.Open(ctx, sim.Kind,
// sim.WithSimulation(gpus, opts...), gpu.WithStreams(n)) returns New(gpus,
// opts..., WithStreams(n)) as a gpu.Set (without gpu.WithStreams,
// New(gpus, opts...): 1 stream per simulated GPU unless opts say). Errors: New's; no WithSimulation ("sim: open: no GPUs to
// simulate (give sim.WithSimulation)").
const Kind = "sim"

func init() { gpu.Register(Kind, driver{}) }

// simulation is the driver setting of WithSimulation.
type simulation struct {
	gpus []topology.DeviceFacts
	opts []Option
}

// DriverKind returns Kind: only the sim driver takes the setting.
func (simulation) DriverKind() string { return Kind }

// WithSimulation is the sim driver's setting for gpu.Open: simulate gpus
// (their IDs and facts, e.g. topology.Topology.GPUs(); copied) as New
// does, with opts (WithStreams, WithLoss, WithLossAfter; gpu.Open's
// gpu.WithStreams overrides WithStreams). gpu.Open of another kind
// refuses it, naming the driver; a later WithSimulation replaces an
// earlier one. Errors (from gpu.Open): New's.
func WithSimulation(gpus []topology.DeviceFacts, opts ...Option) gpu.Option {
	return gpu.WithDriverSetting(simulation{gpus: slices.Clone(gpus), opts: slices.Clone(opts)})
}

// driver opens simulated GPUs for gpu.Open.
type driver struct{}

func (driver) Open(_ context.Context, cfg gpu.Config) (gpu.Set, error) {
	var sim *simulation
	for _, s := range cfg.Settings {
		v, ok := s.(simulation)
		if !ok {
			return nil, fmt.Errorf("sim: open: a driver setting %T: want sim.WithSimulation", s)
		}
		sim = &v
	}
	if sim == nil {
		return nil, errors.New("sim: open: no GPUs to simulate (give sim.WithSimulation)")
	}
	opts := sim.opts
	if cfg.Streams != 0 {
		opts = append(slices.Clip(opts), WithStreams(cfg.Streams))
	}
	s, err := New(sim.gpus, opts...)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// loss is a simulated GPU's loss: when, and how far its launches got.
type loss struct {
	at     lossAt
	mu     sync.Mutex
	queued uint64 // launches queued on the device as lists
	done   uint64 // of those, completed as the lists told
	err    error  // the sticky loss, once it happened
}

// lost returns the device's loss error, nil while it is not lost.
func (l *loss) lost() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// threshold returns how many completed launches lose the device.
func (l *loss) threshold() uint64 {
	if l.at.frac < 0 {
		return l.at.n
	}
	return uint64(math.Ceil(l.at.frac * float64(l.queued)))
}

// lossProgress is the Progress a list on a device with a loss sees: it
// asks to hear of every step, counts the device's completed launches and
// loses the device at its threshold.
type lossProgress struct {
	s    *simStream
	p    gpu.Progress // the CPU stream's
	last uint64       // steps of the list counted in done
}

// Publish counts the list's new steps and loses the device at the
// threshold; see WithLoss.
func (p *lossProgress) Publish(n uint64) (uint64, error) {
	l, d := p.s.d.loss, p.s.d
	l.mu.Lock()
	if l.err == nil && n > p.last {
		l.done += n - p.last
		p.last = n
	}
	if l.err == nil && l.done >= l.threshold() && (n > 0 || l.threshold() == 0) {
		l.err = &gpu.LostError{Device: d.info.ID, Err: errSimulatedLoss}
	}
	err := l.err
	l.mu.Unlock()
	if err != nil {
		return math.MaxUint64, err
	}
	if _, err := p.p.Publish(n); err != nil {
		return math.MaxUint64, err
	}
	return n + 1, nil
}

// errSimulatedLoss is the cause of a simulated GPU's loss.
var errSimulatedLoss = errors.New("sim: simulated device loss")

// lossList runs a list under a lossProgress.
type lossList struct {
	p *lossProgress
	l gpu.List
}

func (l *lossList) Run(p gpu.Progress) {
	l.p.p = p
	l.l.Run(l.p)
}

// EnqueueList queues l; on a device with a loss it counts l's launches
// while the device is not lost, and l's publishes answer the loss once it
// is (see WithLoss). See gpu.Lister.
func (s *simStream) EnqueueList(after gpu.Event, n uint64, l gpu.List) (*gpu.Counter, uint64, error) {
	if s.d.loss == nil || l == nil {
		return s.Lister.EnqueueList(after, n, l)
	}
	ls := s.d.loss
	ls.mu.Lock()
	if ls.err == nil {
		ls.queued += n
	}
	ls.mu.Unlock()
	return s.Lister.EnqueueList(after, n, &lossList{p: &lossProgress{s: s}, l: l})
}

// Launch queues t, unless the device is lost.
func (s *simStream) Launch(t gpu.Task) error {
	if err := s.lost(); err != nil {
		return err
	}
	return s.Lister.Launch(t)
}

// LaunchBatch queues ts, unless the device is lost.
func (s *simStream) LaunchBatch(ts []gpu.Task) error {
	if err := s.lost(); err != nil {
		return err
	}
	return s.Lister.LaunchBatch(ts)
}

func (s *simStream) lost() error {
	if s.d.loss == nil {
		return nil
	}
	return s.d.loss.lost()
}
