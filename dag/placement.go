package dag

import (
	"fmt"
	"time"

	"github.com/streamdag/streamdag/topology"
)

// OnDevice pins the kernel to device id: the executor places it there or,
// when it has no such device, fails planning with an error naming both.
func OnDevice(id topology.DeviceID) KernelOption {
	return func(g *Graph, k *Kernel) { k.Device = &id }
}

// PreferDevice makes id the kernel's preferred device: placement takes it
// when it is no slower than the best choice by more than the kernel's
// estimate (so a preference never costs more than one launch's time).
func PreferDevice(id topology.DeviceID) KernelOption {
	return func(g *Graph, k *Kernel) { k.Prefer = &id }
}

// Estimate gives the kernel's estimated compute time per launch, used by
// placement's cost model (estimated compute + bytes moved × transfer cost
// + load). Negative durations are recorded as errors.
func Estimate(d time.Duration) KernelOption {
	return func(g *Graph, k *Kernel) {
		if d < 0 {
			g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: negative estimate %v", k.Name, d))
			return
		}
		k.Estimate = d
	}
}

// SizeHint gives a value buffer's expected size in bytes, for placement's
// transfer costs (raw buffers use their SizeBytes).
func SizeHint(bytes int64) BufferOption { return func(b *Buffer) { b.SizeHint = max(bytes, 0) } }

// TransferBytes is what placement counts for moving b across devices:
// SizeBytes for a raw buffer, SizeHint for a value buffer.
func (b *Buffer) TransferBytes() int64 {
	if b.Value {
		return b.SizeHint
	}
	return b.SizeBytes
}
