package exec

import (
	"fmt"
	"slices"
	"testing"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/placement"
	"github.com/streamdag/streamdag/topology"
)

// MustNew is New for options a test knows are valid: an error fails tb.
func MustNew(tb testing.TB, dev gpu.Device, opts ...Option) *Executor {
	tb.Helper()
	e, err := New(dev, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// CodeWindow is how many launches a code stream enqueues ahead of the
// oldest it has not settled.
const CodeWindow = codeWindow

// PlanPlaced plans g on e's devices with kernel k on device dev[k],
// whatever a placement strategy would say: writers of one buffer may then
// run on different devices. For tests of the planner's copies.
func PlanPlaced(e *Executor, g *dag.Graph, dev []int) (*Plan, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	if len(dev) != g.NumKernels() {
		return nil, fmt.Errorf("exec: %d devices for %d kernels", len(dev), g.NumKernels())
	}
	ids := make([]topology.DeviceID, len(e.devs))
	for i, d := range e.devs {
		ids[i] = d.ID()
	}
	code, mem, _ := e.caps()
	return planOn(g, ids, e.numStreams(), code, mem, placement.Assignment{Strategy: placement.HEFT, Device: dev}, nil), nil
}

// TraceScheduler makes s call f, under its lock, with one line per run it
// starts: "#3 s1[a b] s0[c] after #1 #2 +1 events" (the run's number, each
// stream of its plan with the tasks' names in stream order, the runs it
// waits for, and how many other events).
func TraceScheduler(s *Scheduler, f func(string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trace = f
}

// KeptMemory returns the device memory p keeps between runs for its
// instance of graph buffer b on device dev; nil when it keeps none.
func KeptMemory(p *Plan, b dag.BufferID, dev topology.DeviceID) gpu.Memory {
	c := p.memc.Load()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	j := p.instanceOn(b, slices.Index(p.devices, dev))
	if j < 0 || j >= len(c.mems) {
		return nil
	}
	return c.mems[j]
}
