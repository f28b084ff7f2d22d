// Package cpu runs launches on the host's CPU cores, as a device with
// streams (layer 1, one device kind under package gpu).
//
// [New] returns a gpu.Device with real streams, and importing the package
// registers its driver under [Kind] ("cpu") for gpu.Open. It needs no cgo.
//
// Each stream is one long-lived worker goroutine that drains an ordered
// queue; an event is a (stream, sequence number) pair that fires when the
// stream's completed count, a gpu.Counter, reaches it, so a satisfied wait
// is one atomic load. A stream waits on any other event (a gpu.Counter's,
// another device's) by bridging it on its worker. Queuing a task needs no
// goroutine, channel or allocation of its own. A task that panics does not
// stop its stream: the panic comes back as a [*gpu.PanicError] from the
// stream's next Synchronize.
//
// Ownership: the caller of New owns the device and must Close it; Close
// drains every stream and stops their workers (no goroutine outlives it).
// Every method is safe for concurrent use.
package cpu
