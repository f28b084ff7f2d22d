package dag

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/streamdag/streamdag/topology"
)

// ErrInjected is the root error of a failure injected with InjectFailure.
var ErrInjected = errors.New("dag: injected failure")

// KernelByName returns the id of the first kernel named name, or false.
// O(kernels).
func (g *Graph) KernelByName(name string) (KernelID, bool) {
	for id := range g.krecs {
		if g.kernelName(id) == name {
			return KernelID(id), true
		}
	}
	return -1, false
}

// InjectFailure replaces the function of the kernel named name with one
// that returns ErrInjected, or panics with it when panics is set: fault
// injection for users and tests (`streamdag run --fail KERNEL[:panic]`).
// The kernel's device variants are dropped, and with them a pin
// (OnDevice) or a preference (PreferDevice) for an OpenCL device, so the
// failing function is its only code and runs wherever host code runs.
// An unknown name is an error that lists a few kernel names.
func (g *Graph) InjectFailure(name string, panics bool) error {
	k, ok := g.KernelByName(name)
	if !ok {
		names := make([]string, 0, 8)
		for id := range min(len(g.krecs), 8) {
			names = append(names, g.KernelName(KernelID(id)))
		}
		more := ""
		if len(g.krecs) > len(names) {
			more = fmt.Sprintf(", … (%d kernels)", len(g.krecs))
		}
		return fmt.Errorf("dag: no kernel %q to fail (kernels: %s%s)", name, strings.Join(names, ", "), more)
	}
	err := ErrInjected
	if panics {
		g.SetFunc(k, func(context.Context, Launch) error { panic(err) })
	} else {
		g.SetFunc(k, func(context.Context, Launch) error { return err })
	}
	if r := g.krecs[k]; r.extra != 0 {
		ex := &g.extras[r.extra-1]
		ex.variants = nil
		if ex.device != nil && ex.device.Kind == topology.KindOpenCL {
			ex.device = nil
		}
		if ex.prefer != nil && ex.prefer.Kind == topology.KindOpenCL {
			ex.prefer = nil
		}
	}
	return nil
}
