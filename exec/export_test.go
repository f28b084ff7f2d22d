package exec

import (
	"fmt"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/placement"
	"github.com/streamdag/streamdag/topology"
)

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
