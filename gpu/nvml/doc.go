// Package nvml finds this machine's NVIDIA GPUs and their links through NVML
// (layer 1, under package gpu).
//
// [Discover] lists the CPU device and the GPUs NVML reports, [HealthCheck]
// re-checks a GPU by UUID before a lease pool (package lease, which a
// program builds over Inventory.Devices) hands it out. It is the only
// package of the module that imports go-nvml (github.com/NVIDIA/go-nvml,
// which needs cgo; imported here as gonvml), with its subpackage
// gpu/nvml/nvmlmock, which completes go-nvml's mock servers from real
// topologies for tests (no package outside tests imports it, so no shipped
// binary links the mocks). Package lease does not import it, so an executor
// that takes a lease backend builds without cgo.
//
// [Discover] reads NVLink links, the P2P matrix (status per caps index,
// common ancestor) and MIG devices. It never fails: what it could not
// learn is in Inventory.Notes. A GPU NVML reports lost
// (ERROR_GPU_IS_LOST) is left out of Devices and listed in
// Inventory.Lost; one lost later is found by the backend's re-check
// ([HealthCheck]) before a claim would hand it out. NVML is never called
// after a failed Init, because doing so can kill the process, and calls
// newer drivers added are made only when the library exports their
// symbol. Tests pass go-nvml's mocks with [WithLibrary].
//
// Every function is safe for concurrent use (NVML reference-counts Init
// and Shutdown).
package nvml
