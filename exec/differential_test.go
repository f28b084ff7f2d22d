package exec_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/topology"
)

// The differential property test: random programs with several byte-range
// writers per buffer, inputs and optional reads run on one device and on
// simulated multi-GPU machines (every placement strategy, 1 and 2 streams
// per device, without a device loss and with the loss of a random device,
// gpu0 included, at a random point), and every run must give what the
// single-device run gives: each kernel's final status and error, and each
// buffer's readability, bytes (or value) and root kernels.
//
// Besides the strategies, each seed also places every kernel on a random
// device (exec.PlanPlaced), so writers of one buffer run on different
// devices. The default run covers 500 seeds, eight runs each (about 40 s
// under -race on two cores). STREAMDAG_DIFF_SEEDS=N runs N seeds instead, and
// STREAMDAG_DIFF_SEED=S runs seed S alone, to reproduce a failure:
//
//	STREAMDAG_DIFF_SEEDS=20000 go test -run TestDifferentialMultiDevice ./exec/
//
// Every program is valid, so a plan refused by any placement fails the
// test.
func TestDifferentialMultiDevice(t *testing.T) {
	seeds := envInt(t, "STREAMDAG_DIFF_SEEDS", 500)
	first := uint64(0)
	if s, ok := os.LookupEnv("STREAMDAG_DIFF_SEED"); ok {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "STREAMDAG_DIFF_SEED")
		first, seeds = v, 1
	}

	ref := newExecutor(t, 1)
	type machine struct {
		name string
		devs []topology.DeviceID
		e    map[[2]int]*exec.Executor // (placement, streams) → executor
		topo *topology.Topology
		gpus []topology.DeviceFacts
	}
	var machines []*machine
	for _, name := range []string{"rtx5090-2gpu-no-p2p", "dgx1-v100"} {
		m := &machine{name: name, e: map[[2]int]*exec.Executor{}}
		m.topo, m.gpus = machineGPUs(t, name)
		for _, pl := range []exec.Placement{exec.PlaceHEFT, exec.PlaceRoundRobin, exec.PlaceLeastLoaded} {
			for _, streams := range []int{1, 2} {
				e, _ := simMachine(t, name, streams, exec.WithPlacement(pl))
				m.e[[2]int{int(pl), streams}] = e
			}
		}
		for _, d := range m.e[[2]int{0, 1}].Devices() {
			m.devs = append(m.devs, d.ID())
		}
		machines = append(machines, m)
	}

	for seed := first; seed < first+uint64(seeds); seed++ {
		rng := rand.New(rand.NewPCG(seed, seed))
		prog := randomProgram(rng)
		want := runProgram(t, ref, prog, nil)
		require.NoError(t, want.planErr, "seed %d: the single-device plan\n%s", seed, prog.describe())
		// Each seed runs one machine and stream count, every placement,
		// without and with a loss; consecutive seeds cover every machine
		// and stream count.
		m := machines[seed%uint64(len(machines))]
		streams := 1 + int(seed/uint64(len(machines)))%2
		for _, pl := range []exec.Placement{exec.PlaceHEFT, exec.PlaceRoundRobin, exec.PlaceLeastLoaded, placeAnywhere} {
			key := [2]int{int(pl), streams}
			if pl == placeAnywhere {
				key[0] = int(exec.PlaceHEFT)
			}
			dev := m.devs[rng.IntN(len(m.devs))]
			if rng.IntN(3) == 0 {
				dev = m.devs[0]
			}
			after := float64(rng.IntN(11)) / 10
			for _, lose := range []bool{false, true} {
				what := fmt.Sprintf("seed %d on %s, %s, %d streams", seed, m.name, exec.Placement(key[0]), key[1])
				if lose {
					what += fmt.Sprintf(", %s lost after %.0f%% of its launches", dev, 100*after)
				}
				var anywhere []int
				if pl == placeAnywhere {
					what = strings.Replace(what, "heft", "kernels placed at random", 1)
					for range prog.kernels {
						anywhere = append(anywhere, rng.IntN(len(m.devs)))
					}
				}
				got := func() *outcome {
					if !lose {
						return runProgram(t, m.e[key], prog, anywhere)
					}
					// A simulated GPU that reports its loss after that
					// share of its own launches, on devices of its own
					// (it stays lost), closed after the run.
					set, err := sim.New(m.gpus, sim.WithStreams(streams), sim.WithLoss(dev, after))
					require.NoError(t, err)
					defer func() { require.NoError(t, set.Close()) }()
					e, err := exec.NewMulti(set.Devices(), m.topo, exec.WithPlacement(exec.Placement(key[0])), exec.WithAllocator(leaktest.Allocator(t)))
					require.NoError(t, err)
					return runProgram(t, e, prog, anywhere)
				}()
				if got.planErr != nil {
					t.Fatalf("%s: plan: %v", what, got.planErr)
				}
				if diff := want.diff(got); diff != "" {
					t.Fatalf("%s: differs from the single-device run:\n%s\nprogram:\n%s", what, diff, prog.describe())
				}
			}
		}
	}
}

// placeAnywhere stands for a placement that puts each kernel on a random
// device: writers of one buffer then often run on different devices,
// which no strategy does, and the planner must still copy the right bytes.
const placeAnywhere = exec.Placement(255)

// seedsOf returns the seeds a property test runs: def seeds from 0, or
// as many as the environment variable name says, or the one seed
// STREAMDAG_DIFF_SEED names.
func seedsOf(t *testing.T, name string, def int) (first uint64, seeds int) {
	seeds = envInt(t, name, def)
	if envInt(t, "STREAMDAG_DIFF_SEED", -1) >= 0 {
		first, seeds = uint64(envInt(t, "STREAMDAG_DIFF_SEED", 0)), 1
	}
	return first, seeds
}

func envInt(t *testing.T, name string, def int) int {
	s, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, name)
	return n
}

// access is one read or write of a random program's kernel.
type access struct {
	buf      dag.BufferID
	off, n   int64
	value    bool  // a value buffer (off, n unused)
	optional bool  // a ReadsOptional read
	short    int64 // a write: the last short bytes of the range are declared but left unwritten
}

type progKernel struct {
	name          string
	reads, writes []access
	fail          bool
	prefer        int // preferred device index, -1 none
}

type program struct {
	bufs    []dag.BufferDecl
	inputs  map[dag.BufferID]num
	kernels []progKernel
	// code, when set, gives kernel i's OpenCL variant (and whether the
	// kernel keeps its Go function beside it), or false for none.
	code func(i int) (opt dag.KernelOption, host bool, ok bool)
	// cancel, when set, is called by kernel cancelAt's Go function
	// before it does anything else.
	cancel   func()
	cancelAt int
	// oneShot runs the program through Executor.Run (a plan made for
	// the run alone) instead of Plan and Execute.
	oneShot bool
	// ran, when set, is called once the run has returned, before its
	// buffers are read.
	ran func()
}

// progShape varies what randomProgramOf generates beyond randomProgram.
type progShape struct {
	// unit, when above 1, sizes raw buffers in units of unit bytes (one
	// to four, plus part of one), and makes about half of the write
	// lengths and read offsets multiples of it: byte ranges then start
	// both at multiples of a device's base address alignment (unit) and
	// anywhere.
	unit int64
	// zero adds a zero-byte raw input, which kernels read (empty ranges).
	zero bool
	// short makes writers leave the end of some declared write ranges
	// unwritten (those bytes read as the buffer's initial zeroes).
	short bool
}

// randomProgram returns a program of 4–16 kernels over raw and value
// buffers. A raw buffer is written in disjoint ranges by several kernels
// (each takes the next bytes); once a kernel reads a buffer nobody writes
// it again, which keeps the graph acyclic, while reads of byte ranges
// (some empty, some of bytes nobody wrote) let the launch order move
// readers of one range before writers of another. Some reads are
// optional, some buffers are inputs, about one kernel in eight fails.
func randomProgram(rng *rand.Rand) *program { return randomProgramOf(rng, progShape{}) }

// randomProgramOf is randomProgram with the variations of shape; the
// zero progShape gives randomProgram's programs, seed for seed.
func randomProgramOf(rng *rand.Rand, shape progShape) *program {
	p := &program{inputs: map[dag.BufferID]num{}}
	type state struct {
		closed  bool  // read by someone: no more writers
		cursor  int64 // raw: bytes handed to writers so far; value: 1 once written
		written bool
	}
	var st []state
	add := func(b dag.BufferDecl) {
		b.ID = dag.BufferID(len(p.bufs))
		p.bufs = append(p.bufs, b)
		st = append(st, state{})
	}
	newBuffer := func() {
		if rng.IntN(4) == 0 {
			add(dag.BufferDecl{Name: fmt.Sprint("v", len(p.bufs)), Value: true})
		} else {
			size := int64(8 + rng.IntN(41))
			if u := shape.unit; u > 1 {
				size = u*int64(1+rng.IntN(4)) + rng.Int64N(u)
			}
			add(dag.BufferDecl{Name: fmt.Sprint("r", len(p.bufs)), SizeBytes: size})
		}
	}
	for range 1 + rng.IntN(2) {
		i := len(p.bufs)
		if rng.IntN(3) == 0 {
			add(dag.BufferDecl{Name: fmt.Sprint("in", i), SizeBytes: 16, Input: true})
			st[i].cursor = 16
		} else {
			add(dag.BufferDecl{Name: fmt.Sprint("in", i), Value: true, Input: true})
			p.inputs[dag.BufferID(i)] = num(1000 + i)
		}
		st[i].closed, st[i].written = true, true
	}
	if shape.zero {
		i := len(p.bufs)
		add(dag.BufferDecl{Name: fmt.Sprint("in", i), SizeBytes: 0, Input: true})
		st[i].closed, st[i].written = true, true
	}
	for range 3 + rng.IntN(4) {
		newBuffer()
	}
	nk := 4 + rng.IntN(13)
	for i := range nk {
		k := progKernel{name: fmt.Sprint("k", i), fail: rng.IntN(8) == 0, prefer: -1}
		if rng.IntN(4) == 0 {
			k.prefer = rng.IntN(8)
		}
		var readable []dag.BufferID
		for b := range p.bufs {
			if st[b].written {
				readable = append(readable, dag.BufferID(b))
			}
		}
		for range rng.IntN(4) {
			if len(readable) == 0 {
				break
			}
			b := readable[rng.IntN(len(readable))]
			buf := p.bufs[b]
			a := access{buf: b, value: buf.Value, n: 1}
			// Reads stay within the bytes written so far (all a buffer gets:
			// nobody writes it after a read); an optional read takes the
			// whole buffer.
			full := buf.Value || st[b].cursor == buf.SizeBytes
			switch {
			case full && rng.IntN(4) == 0:
				a.optional = true
				a.n = max(buf.SizeBytes, 1)
			case !buf.Value:
				a.off = rng.Int64N(st[b].cursor + 1)
				if u := shape.unit; u > 1 && rng.IntN(2) == 0 {
					a.off -= a.off % u
				}
				a.n = rng.Int64N(st[b].cursor - a.off + 1)
			}
			if buf.Value {
				a.off, a.n = 0, 1
			}
			k.reads = append(k.reads, a)
			st[b].closed = true
		}
		nw := 1 + rng.IntN(2)
		for range nw {
			var open []dag.BufferID
			for b := range p.bufs {
				s := st[b]
				full := p.bufs[b].Value && s.written || !p.bufs[b].Value && s.cursor >= p.bufs[b].SizeBytes
				if !s.closed && !full && !slices.ContainsFunc(k.writes, func(w access) bool { return w.buf == dag.BufferID(b) }) {
					open = append(open, dag.BufferID(b))
				}
			}
			if len(open) == 0 {
				newBuffer()
				open = append(open, dag.BufferID(len(p.bufs)-1))
			}
			b := open[rng.IntN(len(open))]
			buf := p.bufs[b]
			a := access{buf: b, value: buf.Value, n: 1}
			if !buf.Value {
				a.off = st[b].cursor
				a.n = 1 + rng.Int64N(buf.SizeBytes-a.off)
				if rng.IntN(3) > 0 { // most take a part, not all that is left
					a.n = 1 + rng.Int64N(a.n)
				}
				if u := shape.unit; u > 1 && rng.IntN(2) == 0 && buf.SizeBytes-a.off >= u {
					a.n = max(u, a.n-a.n%u) // the next writer starts aligned if this one did
				}
				if shape.short && rng.IntN(3) == 0 {
					a.short = rng.Int64N(a.n/2 + 1)
				}
				st[b].cursor += a.n
			}
			k.writes = append(k.writes, a)
			st[b].written = true
		}
		p.kernels = append(p.kernels, k)
	}
	return p
}

// num is the value random programs store: a plain number, copied across
// devices by value.
type num uint64

func (n num) CopyTo(memory.Allocator) (any, int64, error) { return n, 8, nil }

// mix is one step of a 64-bit FNV-1a-like hash.
func mix(h, v uint64) uint64 { return (h ^ v) * 0x100000001b3 }

// graph builds the program as a dag.Graph on devs (nil: no preferences).
func (p *program) graph(devs []topology.DeviceID) *dag.Graph {
	g := dag.New()
	for _, b := range p.bufs {
		var opts []dag.BufferOption
		if b.Input {
			opts = append(opts, dag.Input())
		}
		if b.Value {
			dag.AddValue[any](g, b.Name, opts...).ID()
		} else {
			g.AddBuffer(b.Name, b.SizeBytes, opts...)
		}
	}
	for i, k := range p.kernels {
		var opts []dag.KernelOption
		for _, r := range k.reads {
			switch {
			case r.optional:
				opts = append(opts, dag.ReadsOptional(r.buf))
			case r.value:
				opts = append(opts, dag.Reads(r.buf))
			default:
				opts = append(opts, dag.ReadsRange(r.buf, r.off, r.n))
			}
		}
		for _, w := range k.writes {
			if w.value {
				opts = append(opts, dag.Writes(w.buf))
			} else {
				opts = append(opts, dag.WritesRange(w.buf, w.off, w.n))
			}
		}
		if k.prefer >= 0 && len(devs) > 0 {
			opts = append(opts, dag.PreferDevice(devs[k.prefer%len(devs)]))
		}
		fn := p.kernelFunc(i)
		if p.code != nil {
			if opt, host, ok := p.code(i); ok {
				opts = append(opts, opt)
				if !host {
					fn = nil
				}
			}
		}
		g.AddKernel(k.name, fn, opts...)
	}
	return g
}

// kernelFunc hashes what kernel i reads (a missing optional read counts
// as a marker) and writes bytes or a value derived from the hash.
func (p *program) kernelFunc(i int) dag.KernelFunc {
	k := p.kernels[i]
	return func(_ context.Context, l dag.Launch) error {
		if p.cancel != nil && i == p.cancelAt {
			p.cancel()
		}
		h := mix(0xcbf29ce484222325, uint64(i))
		for j, r := range k.reads {
			if r.optional && l.Missing(r.buf) != nil {
				h = mix(h, 0xdead)
				continue
			}
			in, err := l.Buffer(r.buf, dag.AccessRead)
			if err != nil {
				return err
			}
			switch {
			case r.value:
				switch v := in.Value().(type) {
				case nil:
					h = mix(h, 1)
				case num:
					h = mix(h, uint64(v))
				default:
					return fmt.Errorf("read %d holds a %T", j, v)
				}
			default:
				bs := in.Bytes()
				end := r.off + r.n
				if r.optional {
					end = int64(len(bs))
				}
				for _, c := range bs[r.off:end] {
					h = mix(h, uint64(c))
				}
			}
		}
		if k.fail {
			return fmt.Errorf("boom %s", k.name)
		}
		for j, w := range k.writes {
			out, err := l.Buffer(w.buf, dag.AccessWrite)
			if err != nil {
				return err
			}
			if w.value {
				if err := out.Store(num(mix(h, uint64(j)))); err != nil {
					return err
				}
				continue
			}
			bs := out.Bytes()[w.off : w.off+w.n-w.short]
			for x := range bs {
				bs[x] = byte(mix(h, uint64(j<<16+x)))
			}
		}
		return nil
	}
}

// describe prints the program, one kernel a line.
func (p *program) describe() string {
	var b strings.Builder
	for _, buf := range p.bufs {
		fmt.Fprintf(&b, "  buffer %s: %d bytes value=%v input=%v\n", buf.Name, buf.SizeBytes, buf.Value, buf.Input)
	}
	acc := func(a access) string {
		name := p.bufs[a.buf].Name
		switch {
		case a.optional:
			return name + "?"
		case a.value:
			return name
		}
		if a.short > 0 {
			return fmt.Sprintf("%s[%d:%d) (last %d unwritten)", name, a.off, a.off+a.n, a.short)
		}
		return fmt.Sprintf("%s[%d:%d)", name, a.off, a.off+a.n)
	}
	for _, k := range p.kernels {
		var rs, ws []string
		for _, r := range k.reads {
			rs = append(rs, acc(r))
		}
		for _, w := range k.writes {
			ws = append(ws, acc(w))
		}
		fmt.Fprintf(&b, "  %s: reads %v writes %v fail=%v\n", k.name, rs, ws, k.fail)
	}
	return b.String()
}

// outcome is what a run of a program gives a caller.
type outcome struct {
	planErr error
	status  map[string]string            // kernel → final status and error
	buffers []string                     // by buffer: its bytes or value, or why it cannot be read
	ran     map[topology.DeviceID]int    // launches that ran (ok or failed) by device; not compared
	device  map[string]topology.DeviceID // kernel → the device of its final launch; not compared
	reports []exec.LaunchReport          // the run's launches; not compared
	lost    *topology.DeviceID           // the device the run lost (Report.Lost); not compared
}

// runProgram runs prog on e and returns its outcome; a plan error is returned in the outcome. place,
// when not nil, puts kernel k on device place[k] instead of asking the
// executor's placement.
func runProgram(t *testing.T, e *exec.Executor, prog *program, place []int) *outcome {
	t.Helper()
	return runProgramCtx(t, t.Context(), e, prog, place)
}

// runProgramCtx is runProgram under ctx.
func runProgramCtx(t *testing.T, ctx context.Context, e *exec.Executor, prog *program, place []int) *outcome {
	t.Helper()
	var ids []topology.DeviceID
	for _, d := range e.Devices() {
		ids = append(ids, d.ID())
	}
	g := prog.graph(ids)
	var opts []exec.RunOption
	for b, v := range prog.inputs {
		opts = append(opts, exec.WithInput(b, v))
	}
	var res *exec.Result
	var err error
	if prog.oneShot && place == nil {
		if res, err = e.Run(ctx, g, opts...); err != nil && res == nil {
			return &outcome{planErr: err}
		}
	} else {
		var p *exec.Plan
		if place != nil {
			p, err = exec.PlanPlaced(e, g, place)
		} else {
			p, err = e.Plan(g)
		}
		if err != nil {
			return &outcome{planErr: err}
		}
		defer p.ReleaseDeviceMemory() // after res.Close (the runs here keep nothing)
		res, err = e.Execute(ctx, p, opts...)
	}
	require.NoError(t, err)
	defer res.Close()
	if prog.ran != nil {
		prog.ran()
	}
	o := &outcome{status: map[string]string{}, ran: map[topology.DeviceID]int{}, device: map[string]topology.DeviceID{}, reports: res.Report.Launches(), lost: res.Report.Lost}
	for _, l := range res.Report.Launches() {
		if l.Status == exec.StatusOK || l.Status == exec.StatusFailed {
			o.ran[l.Device]++
		}
		line := l.Status.String()
		if l.Err != nil {
			msg, _, _ := strings.Cut(l.Err.Error(), "\n")
			line += ": " + softAsHost(msg)
		}
		o.status[l.Kernel] = line // the last launch of a kernel is its final one
		o.device[l.Kernel] = l.Device
	}
	for b := range g.NumBuffers() {
		buf, err := res.Buffer(dag.BufferID(b))
		if err != nil {
			o.buffers = append(o.buffers, "unreadable: "+roots(err))
			continue
		}
		if bs := buf.Bytes(); bs != nil {
			o.buffers = append(o.buffers, fmt.Sprintf("bytes %x", bs))
		} else {
			o.buffers = append(o.buffers, fmt.Sprintf("value %v", buf.Value()))
		}
	}
	return o
}

// roots lists the root kernels and errors of a read error, sorted.
func roots(err error) string {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var out []string
	for _, e := range errs {
		var ue *failgraph.UnwrittenError
		if errors.As(e, &ue) {
			out = append(out, fmt.Sprintf("%s (%s)", ue.Kernel, softAsHost(fmt.Sprint(ue.Root))))
		} else {
			out = append(out, e.Error())
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// diff describes how got differs from o (kernels by name, buffers by id),
// or returns "".
func (o *outcome) diff(got *outcome) string {
	var b strings.Builder
	var names []string
	for k := range o.status {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if o.status[k] != got.status[k] {
			fmt.Fprintf(&b, "  kernel %s: want %q, got %q\n", k, o.status[k], got.status[k])
		}
	}
	for i := range o.buffers {
		if o.buffers[i] != got.buffers[i] {
			fmt.Fprintf(&b, "  buffer %d: want %s, got %s\n", i, o.buffers[i], got.buffers[i])
		}
	}
	return b.String()
}
