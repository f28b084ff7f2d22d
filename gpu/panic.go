package gpu

import (
	"fmt"

	"github.com/streamdag/streamdag/topology"
)

// PanicError is a panic (or runtime.Goexit) recovered from a host task of
// a stream, as Stream.Synchronize returns it on the CPU device and on an
// OpenCL device's streams. The stream went on running later tasks. Only
// the first panic since the previous Synchronize is kept; More counts the
// others.
type PanicError struct {
	Device topology.DeviceID // the device, "cpu" or "opencl0"
	Stream int               // the stream's index on the device
	Value  any               // the value passed to panic; nil when Goexit is true
	Goexit bool              // the task called runtime.Goexit instead of returning
	Stack  []byte            // the task's goroutine stack when it was recovered
	More   int               // further panics on the stream since the previous Synchronize, not kept
}

// Error returns "gpu: cpu stream N: task panicked: VALUE", plus how many
// more panics there were. The stack is in Stack, not in the message.
func (e *PanicError) Error() string {
	var msg string
	if e.Goexit {
		msg = fmt.Sprintf("gpu: %s stream %d: task called runtime.Goexit", e.Device, e.Stream)
	} else {
		msg = fmt.Sprintf("gpu: %s stream %d: task panicked: %v", e.Device, e.Stream, e.Value)
	}
	if e.More > 0 {
		msg += fmt.Sprintf(" (and %d more)", e.More)
	}
	return msg
}

// Unwrap returns Value when it is an error, so errors.Is and errors.As see
// through the panic; otherwise nil.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
