package k2k

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/placement"
	"github.com/streamdag/streamdag/topology"
)

// Errors of a Router (test with errors.Is).
var (
	// ErrClosed is returned by Send, Drain, DrainAll and Handle after
	// Close.
	ErrClosed = errors.New("k2k: router closed")
	// ErrKernelGone: the destination kernel was removed from the
	// Coordinator between Send and delivery.
	ErrKernelGone = errors.New("k2k: destination kernel gone")
	// ErrDeviceRemoved: the destination device was unregistered from the
	// Coordinator between Send and delivery.
	ErrDeviceRemoved = errors.New("k2k: destination device removed")
	// ErrKernelMoved: the destination kernel was moved to another device
	// between Send and delivery (its device is still registered).
	ErrKernelMoved = errors.New("k2k: destination kernel moved")
	// ErrNoHandler: the destination kernel has no Handler at delivery.
	ErrNoHandler = errors.New("k2k: no handler")
)

// UnknownKernelError is Send's error for a kernel the Coordinator has on
// no device. It matches placement.ErrKernelNotFound.
type UnknownKernelError struct {
	Kernel string // the kernel's name
	Role   string // "source" or "destination"
}

// Error returns `k2k: unknown source kernel "a"`.
func (e *UnknownKernelError) Error() string {
	return "k2k: unknown " + e.Role + " kernel " + strconv.Quote(e.Kernel)
}

// Unwrap returns placement.ErrKernelNotFound.
func (e *UnknownKernelError) Unwrap() error { return placement.ErrKernelNotFound }

// MaxFailureRecords is how many failed deliveries Failures keeps (the
// newest); Traffic.Failed counts them all.
const MaxFailureRecords = 256

// DevicePair is a (source device, destination device) pair: the key of a queue.
type DevicePair struct {
	From, To topology.DeviceID
}

// String returns "gpu0→gpu1".
func (p DevicePair) String() string { return p.From.String() + "→" + p.To.String() }

// Message describes one message a Send queued. Path is shared by the
// copies of a Message: read it, do not modify it.
type Message struct {
	ID       uint64             // from 1, in the order Sends queued them
	Source   string             // the sending kernel
	Dest     string             // the receiving kernel
	From, To topology.DeviceID  // the kernels' devices at Send
	Route    topology.RouteKind // how the payload goes From → To
	// Path is the devices the payload crosses, From first, To last: one
	// element for RouteSame, two for RouteDirect, three for RouteViaGPU
	// (the intermediate GPU) and RouteViaHost (topology.CPU: host memory).
	Path   []topology.DeviceID
	Bytes  int64     // the payload's size in bytes
	Queued time.Time // when Send queued it (with a monotonic reading)
}

// Outcome is what became of one message a Drain took.
type Outcome struct {
	Message Message
	// Latency is the time from queueing to delivery (the handler
	// returned nil); 0 when Err is set.
	Latency time.Duration
	// Err is nil for a delivery, else why it failed: ErrKernelGone,
	// ErrDeviceRemoved, ErrKernelMoved, ErrNoHandler, a copy's error or
	// the handler's, wrapped with the message's ID and kernels.
	Err error
}

// RouteStats are the delivery counters of one route kind.
type RouteStats struct {
	Messages     uint64        // messages delivered
	Bytes        int64         // their payload bytes
	TotalLatency time.Duration // sum of their Outcome.Latency
}

// AvgLatency is TotalLatency / Messages, 0 when there is none.
func (s RouteStats) AvgLatency() time.Duration {
	if s.Messages == 0 {
		return 0
	}
	return s.TotalLatency / time.Duration(s.Messages)
}

// Traffic is a snapshot of a Router's counters.
type Traffic struct {
	Sent      uint64 // messages Send queued
	Delivered uint64 // messages delivered
	Failed    uint64 // deliveries that failed (Failures holds the newest)
	Dropped   uint64 // messages still queued when Close ran, released undelivered
	Pending   int    // messages queued now and not yet taken by a Drain
	Bytes     int64  // payload bytes delivered
	// ByRoute holds the delivery counters of each route kind that
	// delivered at least one message (a new map per snapshot).
	ByRoute map[topology.RouteKind]RouteStats
}

// Delivery is a message handed to its destination kernel's Handler, with
// its payload in the destination device's memory. It is valid only
// during the Handler's call: the Router releases the payload afterwards.
type Delivery struct {
	Message Message
	at      *place
}

// Memory is the payload on a code device (an OpenCL device), nil on a
// host-memory device. Do not release it.
func (d *Delivery) Memory() gpu.Memory { return d.at.mem }

// HostBytes is the payload on a host-memory device (the CPU device, a
// simulated GPU), nil on a code device. Do not keep it past the call.
func (d *Delivery) HostBytes() []byte {
	if d.at.mem != nil {
		return nil
	}
	return d.at.host
}

// ReadBack returns a new host copy of the payload: copied out of a code
// device's memory on its stream 0 (waited for to completion once
// enqueued; ctx is checked before), or copied from host memory. Errors:
// ctx's, the device's.
func (d *Delivery) ReadBack(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]byte, d.at.n)
	if d.at.mem == nil {
		copy(out, d.at.host)
		return out, nil
	}
	s, err := codeStream(d.at.dev.(gpu.CodeDevice))
	if err == nil {
		if _, err = s.CopyOut(out, d.at.mem, 0); err == nil {
			err = finish(ctx, s)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("k2k: read back message %d on %s: %w", d.Message.ID, d.at.dev.ID(), err)
	}
	return out, nil
}

// Handler receives the messages delivered to one kernel. A nil return
// delivers the message; an error (or a panic, recovered) fails it. It
// runs on the goroutine of the Drain that took the message, one message
// at a time per pair. It may call Send and Handle, but not Drain,
// DrainAll or Close (a Drain of its own pair would wait for itself, one
// of another pair could wait in a cycle, Close waits for the Drain).
type Handler func(ctx context.Context, d *Delivery) error

// Option configures New. Options return an error for a bad value.
type Option func(*config) error

type config struct {
	alloc memory.Allocator
}

// WithAllocator makes the Router take host memory (payloads on the CPU
// device and simulated GPUs, and host staging memory) from alloc; the
// default is memory.DefaultAllocator. Error: a nil alloc.
func WithAllocator(alloc memory.Allocator) Option {
	return func(c *config) error {
		if alloc == nil {
			return errors.New("k2k: WithAllocator: nil allocator")
		}
		c.alloc = alloc
		return nil
	}
}

// envelope is a queued message and its payload on the source device.
type envelope struct {
	msg Message
	at  place
}

// queue holds one pair's messages in Send order; drain serialises the
// pair's Drains so deliveries stay in that order.
type queue struct {
	drain sync.Mutex
	msgs  []*envelope
}

// Router routes kernel-to-kernel messages between devices (see the
// package doc). Create it with New; the zero value is not usable.
//
// Send queues; Drain and DrainAll move and deliver; Close releases. Each
// pair's messages are delivered in Send order (FIFO per pair: a Drain
// takes the pair's whole queue, and Drains of one pair run one at a
// time); pairs are independent. A Send that returned before a Drain of
// its pair started is taken by that Drain.
//
// All methods are safe for concurrent use.
type Router struct {
	coord *placement.Coordinator
	devs  map[topology.DeviceID]gpu.Device
	alloc memory.Allocator

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup // Sends and Drains admitted before Close
	queues   map[DevicePair]*queue
	handlers map[string]Handler
	nextID   uint64
	stats    Traffic
	failures []Outcome // the newest MaxFailureRecords failures, oldest first
}

// New returns a Router over coord (the kernels' devices, the topology,
// CanP2P) and devices, the devices payloads can be on: every device a
// kernel that sends or receives is assigned to, and the GPUs a via-gpu
// route may cross (a GPU not held is never an intermediate). The caller
// keeps ownership of both and closes the devices after the Router. New
// starts no goroutine. Errors: a nil coord, no device, a nil or
// duplicate device, a bad option.
func New(coord *placement.Coordinator, devices []gpu.Device, opts ...Option) (*Router, error) {
	cfg := config{alloc: memory.DefaultAllocator}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if coord == nil {
		return nil, errors.New("k2k: new router: nil coordinator")
	}
	if len(devices) == 0 {
		return nil, errors.New("k2k: new router: no devices")
	}
	r := &Router{coord: coord, devs: map[topology.DeviceID]gpu.Device{}, alloc: cfg.alloc,
		queues: map[DevicePair]*queue{}, handlers: map[string]Handler{}}
	for i, d := range devices {
		if d == nil {
			return nil, fmt.Errorf("k2k: new router: devices[%d] is nil", i)
		}
		if _, dup := r.devs[d.ID()]; dup {
			return nil, fmt.Errorf("k2k: new router: device %s listed twice", d.ID())
		}
		r.devs[d.ID()] = d
	}
	return r, nil
}

// enter admits a Send or Drain; false after Close. A true return must be
// matched by r.inflight.Done.
func (r *Router) enter() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.inflight.Add(1)
	return true
}

// Handle makes h receive the messages delivered to kernel k (replacing
// any earlier handler); a nil h removes it. Errors: an empty k,
// ErrClosed.
func (r *Router) Handle(k string, h Handler) error {
	if k == "" {
		return errors.New("k2k: handle: empty kernel name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if h == nil {
		delete(r.handlers, k)
	} else {
		r.handlers[k] = h
	}
	return nil
}

// maxListed bounds the devices an error lists.
const maxListed = 8

// device returns the held device of kernel k (as role) at id.
func (r *Router) device(k, role string, id topology.DeviceID) (gpu.Device, error) {
	d, ok := r.devs[id]
	if !ok {
		ids := slices.SortedFunc(maps.Keys(r.devs), cmpID)
		held := fmt.Sprint(ids)
		if len(ids) > maxListed {
			held = fmt.Sprintf("%v … (%d in all)", ids[:maxListed], len(ids))
		}
		return nil, fmt.Errorf("k2k: %s kernel %q is on %s, which the router does not hold (it holds %s)", role, k, id, held)
	}
	return d, nil
}

func cmpID(a, b topology.DeviceID) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Index, b.Index))
}

// hostMemory reports whether the router holds id and its memory is host
// memory (a device that is no code device), so a peer copy can reach it.
func (r *Router) hostMemory(id topology.DeviceID) bool {
	d, ok := r.devs[id]
	if !ok {
		return false
	}
	_, code := d.(gpu.CodeDevice)
	return !code
}

// Route returns how a payload of bytes would go from device from to
// device to (the rules of the package doc) and the devices it crosses.
// It does not check that the router holds from and to.
func (r *Router) Route(bytes int64, from, to topology.DeviceID) (topology.RouteKind, []topology.DeviceID) {
	switch {
	case from == to:
		return topology.RouteSame, []topology.DeviceID{from}
	case from == topology.CPU || to == topology.CPU:
		return topology.RouteDirect, []topology.DeviceID{from, to}
	}
	peer := func(a, b topology.DeviceID) bool {
		return r.hostMemory(a) && r.hostMemory(b) && r.coord.CanP2P(a, b)
	}
	if peer(from, to) {
		return topology.RouteDirect, []topology.DeviceID{from, to}
	}
	host := []topology.DeviceID{from, topology.CPU, to}
	topo := r.coord.Topology()
	if topo == nil || from.Kind != topology.KindGPU || to.Kind != topology.KindGPU {
		return topology.RouteViaHost, host
	}
	cost := func(a, b topology.DeviceID) (time.Duration, bool) {
		l, ok := topo.Link(a, b)
		return l.HopCost(bytes), ok && l.Direct
	}
	up, okUp := cost(from, topology.CPU)
	down, okDown := cost(topology.CPU, to)
	if !okUp || !okDown {
		return topology.RouteViaHost, host
	}
	best, mid, found := up+down, topology.DeviceID{}, false
	for _, g := range topo.GPUs() {
		m := g.ID
		if m == from || m == to || !peer(from, m) || !peer(m, to) {
			continue
		}
		a, _ := cost(from, m)
		b, _ := cost(m, to)
		if c := a + b; c < best {
			best, mid, found = c, m, true
		}
	}
	if found {
		return topology.RouteViaGPU, []topology.DeviceID{from, mid, to}
	}
	return topology.RouteViaHost, host
}

// Send queues a message from kernel src to kernel dst carrying a copy of
// payload: it resolves both kernels' devices through the Coordinator,
// chooses the route (Route), copies payload into memory on src's device
// (as the source kernel's output would be) and queues the message on the
// pair (src's device, dst's device). payload may be reused once Send
// returns. It returns the queued Message.
//
// Errors (nothing is queued): *UnknownKernelError for a kernel the
// Coordinator has on no device; a kernel on a device the router does not
// hold; the source device's allocation or copy error; ctx's error before
// the copy; ErrClosed.
func (r *Router) Send(ctx context.Context, src, dst string, payload []byte) (Message, error) {
	if !r.enter() {
		return Message{}, ErrClosed
	}
	defer r.inflight.Done()
	from, ok := r.coord.DeviceOf(src)
	if !ok {
		return Message{}, &UnknownKernelError{Kernel: src, Role: "source"}
	}
	to, ok := r.coord.DeviceOf(dst)
	if !ok {
		return Message{}, &UnknownKernelError{Kernel: dst, Role: "destination"}
	}
	fromDev, err := r.device(src, "source", from)
	if err != nil {
		return Message{}, err
	}
	if _, err := r.device(dst, "destination", to); err != nil {
		return Message{}, err
	}
	n := int64(len(payload))
	kind, path := r.Route(n, from, to)
	at, err := hop(ctx, r.alloc, &place{host: payload, n: n}, fromDev)
	if err != nil {
		return Message{}, fmt.Errorf("k2k: send %s→%s: %w", src, dst, err)
	}
	e := &envelope{at: at, msg: Message{Source: src, Dest: dst, From: from, To: to, Route: kind, Path: path, Bytes: n}}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	e.msg.ID, e.msg.Queued = r.nextID, time.Now()
	q := r.queueOf(DevicePair{from, to})
	q.msgs = append(q.msgs, e)
	r.stats.Sent++
	r.stats.Pending++
	return e.msg, nil
}

// queueOf returns p's queue, made on first use. Callers hold r.mu.
func (r *Router) queueOf(p DevicePair) *queue {
	q := r.queues[p]
	if q == nil {
		q = &queue{}
		r.queues[p] = q
	}
	return q
}

// Pending returns the number of messages queued on the pair (from, to)
// and not yet taken by a Drain.
func (r *Router) Pending(from, to topology.DeviceID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.queues[DevicePair{from, to}]; q != nil {
		return len(q.msgs)
	}
	return 0
}

// PendingTotal returns the number of messages queued on every pair and
// not yet taken by a Drain.
func (r *Router) PendingTotal() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats.Pending
}

// Pairs returns the pairs with pending messages, sorted by source then
// destination device.
func (r *Router) Pairs() []DevicePair {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []DevicePair
	for p, q := range r.queues {
		if len(q.msgs) > 0 {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b DevicePair) int { return cmp.Or(cmpID(a.From, b.From), cmpID(a.To, b.To)) })
	return out
}

// Drain takes the messages queued on the pair (from, to) and delivers
// them in Send order: for each, it checks that the destination kernel is
// still assigned to the message's destination device (ErrDeviceRemoved,
// ErrKernelGone, ErrKernelMoved otherwise) and has a Handler
// (ErrNoHandler), moves the payload along the message's route into the
// destination device's memory, and calls the Handler. It returns one
// Outcome per message it took, in order; failures are also recorded
// (Failures, Traffic) and their payloads released: none is lost silently.
//
// Drains of one pair run one at a time (a second waits for the first);
// messages queued during a Drain are left for the next. When ctx is done
// between two messages, Drain puts the ones it has not started back at
// the front of the pair's queue and returns the outcomes so far with
// ctx.Err(); a copy once enqueued is waited for. Errors: ErrClosed (no
// message taken), ctx's.
func (r *Router) Drain(ctx context.Context, from, to topology.DeviceID) ([]Outcome, error) {
	if !r.enter() {
		return nil, ErrClosed
	}
	defer r.inflight.Done()
	return r.drain(ctx, DevicePair{from, to})
}

func (r *Router) drain(ctx context.Context, p DevicePair) ([]Outcome, error) {
	r.mu.Lock()
	q := r.queueOf(p)
	r.mu.Unlock()
	q.drain.Lock()
	defer q.drain.Unlock()
	r.mu.Lock()
	msgs := q.msgs
	q.msgs = nil
	r.stats.Pending -= len(msgs)
	r.mu.Unlock()
	out := make([]Outcome, 0, len(msgs))
	for i, e := range msgs {
		if err := ctx.Err(); err != nil {
			rest := msgs[i:]
			r.mu.Lock()
			q.msgs = append(rest, q.msgs...)
			r.stats.Pending += len(rest)
			r.mu.Unlock()
			return out, err
		}
		out = append(out, r.deliver(ctx, e))
	}
	return out, nil
}

// DrainAll drains every pair with pending messages (Pairs, in that
// order) and returns the outcomes of all, pair after pair. Errors as
// Drain; on ctx's error the pairs not reached keep their messages.
func (r *Router) DrainAll(ctx context.Context) ([]Outcome, error) {
	if !r.enter() {
		return nil, ErrClosed
	}
	defer r.inflight.Done()
	var out []Outcome
	for _, p := range r.Pairs() {
		o, err := r.drain(ctx, p)
		out = append(out, o...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// deliver moves e's payload to its destination and hands it over, and
// records the outcome. e's memory is released whatever happens.
func (r *Router) deliver(ctx context.Context, e *envelope) Outcome {
	m := e.msg
	fail := func(err error) Outcome {
		o := Outcome{Message: m, Err: fmt.Errorf("k2k: message %d %s→%s: %w", m.ID, m.Source, m.Dest, err)}
		r.mu.Lock()
		r.stats.Failed++
		if len(r.failures) == MaxFailureRecords {
			r.failures = slices.Delete(r.failures, 0, 1)
		}
		r.failures = append(r.failures, o)
		r.mu.Unlock()
		return o
	}
	if err := r.check(m); err != nil {
		return fail(errors.Join(err, e.at.release(r.alloc)))
	}
	r.mu.Lock()
	h := r.handlers[m.Dest]
	r.mu.Unlock()
	if h == nil {
		return fail(errors.Join(fmt.Errorf("%w for kernel %q", ErrNoHandler, m.Dest), e.at.release(r.alloc)))
	}
	at, err := carry(ctx, r.alloc, e.at, m.Path, r.devs)
	if err != nil {
		return fail(err)
	}
	err = call(ctx, h, &Delivery{Message: m, at: &at})
	lat := time.Since(m.Queued)
	if rerr := at.release(r.alloc); err != nil || rerr != nil {
		return fail(errors.Join(err, rerr))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Delivered++
	r.stats.Bytes += m.Bytes
	if r.stats.ByRoute == nil {
		r.stats.ByRoute = map[topology.RouteKind]RouteStats{}
	}
	s := r.stats.ByRoute[m.Route]
	s.Messages++
	s.Bytes += m.Bytes
	s.TotalLatency += lat
	r.stats.ByRoute[m.Route] = s
	return Outcome{Message: m, Latency: lat}
}

// check reports why m can no longer be delivered where it was sent, nil
// when its destination kernel is still on m.To.
func (r *Router) check(m Message) error {
	if _, ok := r.coord.DeviceStatus(m.To); !ok {
		return fmt.Errorf("%w: %s (kernel %q)", ErrDeviceRemoved, m.To, m.Dest)
	}
	now, ok := r.coord.DeviceOf(m.Dest)
	switch {
	case !ok:
		return fmt.Errorf("%w: %q is on no device", ErrKernelGone, m.Dest)
	case now != m.To:
		return fmt.Errorf("%w: %q is on %s, not %s", ErrKernelMoved, m.Dest, now, m.To)
	}
	return nil
}

// call runs h, turning a panic into an error.
func call(ctx context.Context, h Handler, d *Delivery) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("k2k: handler of %q panicked: %v", d.Message.Dest, v)
		}
	}()
	return h(ctx, d)
}

// Failures returns the newest failed deliveries (at most
// MaxFailureRecords), oldest first.
func (r *Router) Failures() []Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.failures)
}

// Traffic returns a snapshot of the counters.
func (r *Router) Traffic() Traffic {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.ByRoute = maps.Clone(r.stats.ByRoute)
	if s.ByRoute == nil {
		s.ByRoute = map[topology.RouteKind]RouteStats{}
	}
	return s
}

// Close refuses new Sends, Drains and Handles (ErrClosed), waits for
// those in progress to return, then releases the payloads of the
// messages still queued, undelivered (Traffic.Dropped counts them). It
// returns the errors of those releases, joined. Close is idempotent: a
// later call returns nil at once. It must not be called from a Handler
// (it would wait for the Drain running it).
func (r *Router) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.inflight.Wait()
	r.mu.Lock()
	var left []*envelope
	for _, q := range r.queues {
		left = append(left, q.msgs...)
		q.msgs = nil
	}
	r.stats.Dropped += uint64(len(left))
	r.stats.Pending = 0
	r.mu.Unlock()
	var errs []error
	for _, e := range left {
		errs = append(errs, e.at.release(r.alloc))
	}
	return errors.Join(errs...)
}
