// Package buffers allocates the memory a pipeline runs on and bounds it by
// per-device byte budgets (layer 1).
//
// Its objects are [Buffer], a named region of memory on one device,
// [Binding], a byte range of a buffer, and [DeviceAllocator], which
// allocates host buffers through an arrow-go memory.Allocator under a byte
// [Budget].
//
// A host buffer can also hold one Go value (typically an arrow.RecordBatch
// or arrow.Array): [Buffer.Store] keeps it and releases the previous one;
// [Buffer.Release] releases both the value and the bytes. Tests pass a
// memory.CheckedAllocator and assert that no byte is left live.
//
// A Buffer is not safe for concurrent mutation: the executor orders its
// writers and readers by streams and events. A DeviceAllocator and a
// Budget are safe for concurrent use.
package buffers
