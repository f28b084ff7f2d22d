package dag

import (
	"time"

	"github.com/streamdag/streamdag/topology"
)

// OnDevice pins the kernel to device id: the executor places it there or,
// when it has no such device, fails planning with an error naming both.
func OnDevice(id topology.DeviceID) KernelOption {
	return declare(kernelDecl{kind: optDevice, device: id})
}

// PreferDevice makes id the kernel's preferred device: placement takes it
// when it is no slower than the best choice by more than the kernel's
// estimate (so a preference never costs more than one launch's time).
func PreferDevice(id topology.DeviceID) KernelOption {
	return declare(kernelDecl{kind: optPrefer, device: id})
}

// Estimate gives the kernel's estimated compute time per launch, used by
// placement's cost model (estimated compute + bytes moved × transfer cost
// + load). A negative duration is recorded and reported by Validate.
func Estimate(d time.Duration) KernelOption {
	return declare(kernelDecl{kind: optEstimate, estimate: d})
}

// SizeHint gives a value buffer's expected size in bytes, for placement's
// transfer costs (raw buffers use their SizeBytes).
func SizeHint(bytes int64) BufferOption {
	return declareBuffer(bufferDecl{kind: bufOptSizeHint, n: max(bytes, 0)})
}

// TransferBytes is what placement counts for moving b across devices:
// SizeBytes for a raw buffer, SizeHint for a value buffer.
func (b BufferDecl) TransferBytes() int64 {
	if b.Value {
		return b.SizeHint
	}
	return b.SizeBytes
}
