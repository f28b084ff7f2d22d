// Package gpu is streamdag's device layer (layer 1): the stream runtime
// ([Device], [Stream], [Event], and the CPU device [NewCPU]) and the GPU
// inventory ([Discover], through NVML via go-nvml).
//
// The CPU device is a first-class device with real streams: each stream is
// one long-lived worker goroutine that drains an ordered queue; an event is
// a (stream, sequence number) pair that fires when the stream's completed
// count reaches it. Queuing a task needs no goroutine, channel or
// allocation of its own.
//
// Only this package (and its subpackages) imports go-nvml. NVML is never
// called after a failed Init, because doing so can kill the process.
// A CUDA device comes later behind the same interfaces; until then no code
// path here pretends to run on a GPU.
package gpu
