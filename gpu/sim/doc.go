// Package sim simulates the GPUs of a real machine as devices, to plan and
// test multi-GPU runs on a host without them (layer 1, one device kind under
// package gpu).
//
// [New] returns one gpu.Device per GPU of a machine, and importing the
// package registers its driver under [Kind] ("sim") for gpu.Open (with
// [WithSimulation] of the GPUs and Options such as [WithLoss]).
// It needs no cgo.
//
// A simulated GPU runs its kernels on the host, on streams of one shared
// CPU device (package gpu/cpu), so an event recorded on one simulated GPU
// can be waited on by another, as CUDA events can across devices. It
// models placement, per-device memory and transfers (the executor times
// each cross-device copy from the topology), never GPU speed, and never
// sleeps to pretend.
//
// Ownership: the caller of New owns the [gpu.Set] it returns and must
// Close it, which stops every stream; closing one simulated GPU only waits
// for its work.
// Every method is safe for concurrent use.
package sim
