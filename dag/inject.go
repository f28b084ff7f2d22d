package dag

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrInjected is the root error of a failure injected with InjectFailure.
var ErrInjected = errors.New("injected failure")

// KernelByName returns the kernel named name, or false. O(kernels).
func (g *Graph) KernelByName(name string) (*Kernel, bool) {
	for _, k := range g.kernels {
		if k.Name == name {
			return k, true
		}
	}
	return nil, false
}

// InjectFailure replaces the function of the kernel named name with one
// that returns ErrInjected, or panics with it when panics is set: fault
// injection for users and tests (`streamdag run --fail KERNEL[:panic]`).
// An unknown name is an error that lists a few kernel names.
func (g *Graph) InjectFailure(name string, panics bool) error {
	k, ok := g.KernelByName(name)
	if !ok {
		names := make([]string, 0, 8)
		for _, k := range g.kernels[:min(len(g.kernels), 8)] {
			names = append(names, k.Name)
		}
		more := ""
		if len(g.kernels) > len(names) {
			more = fmt.Sprintf(", … (%d kernels)", len(g.kernels))
		}
		return fmt.Errorf("dag: no kernel %q to fail (kernels: %s%s)", name, strings.Join(names, ", "), more)
	}
	err := ErrInjected
	if panics {
		k.Fn = func(context.Context, Launch) error { panic(err) }
	} else {
		k.Fn = func(context.Context, Launch) error { return err }
	}
	return nil
}
