// Package gpu is the contract between the executor and the device drivers:
// what every kind of device offers, and the registry that opens devices by
// kind (layer 1).
//
// It holds the interfaces an executor drives on every kind of device
// ([Device], [Stream], [Event], [Task]) and the driver registry by kind
// ([Register], [Open], [Lookup], [Drivers]). It is the driver contract, as
// database/sql/driver is for database/sql: the process-owned backend and its
// lease pool are package lease, and the placement engine with the multi-GPU
// coordinator is package placement; both reach devices only through this
// contract. Nothing here needs cgo or loads a vendor library: the driver
// packages do.
//
// # Streams, events and device code
//
// A [Stream] enqueues and returns: host tasks ([Stream.Launch]), and on a
// [CodeDevice]'s streams ([CodeStream]) launches of device code
// ([KernelLaunch] of a [Program]), copies between host memory and device
// [Memory], and fills. [Stream.Record] returns an [Event];
// [Stream.Wait] is enqueued on the device for an event of the same
// device and bridged for any other. A failure a device reports after the
// fact comes from [Event.Wait] as a [*CommandError] naming the device,
// the stream, the command's sequence number (the one its [CodeStream]
// enqueue returned) and its label; a panic in a host task comes from
// [Stream.Synchronize] as a [*PanicError]. [Counter] is the one host-side
// event machine: the CPU device's streams count on it, and so does an
// executor's per-run progress, so every host-observed event is a count
// reaching a target.
//
// # Drivers
//
// Each kind of device lives in its own package, which registers its
// [Driver] in init, as database/sql drivers do: gpu/cpu (kind "cpu", the
// host CPU device), gpu/sim (kind "sim", simulated GPUs of a real
// topology) and gpu/opencl (kind "opencl", OpenCL devices of any vendor,
// CodeDevices). Each device says which driver it comes from
// ([Device.Kind]) and, by its capabilities, what code it runs: a [Device]
// that is no [CodeDevice] has host-addressable memory and runs host code
// (a kernel's Go function) in its streams' tasks; a [CodeDevice] runs the
// device code its [CodeDevice.Code] names on memory of its own. An
// executor chooses a kernel's code by those capabilities, never by the
// driver's kind, so a driver registered anywhere (a test's included) is
// driven like the built-in ones. Importing the package makes the kind
// available:
//
//	import _ "github.com/streamdag/streamdag/gpu/cpu"
//
//	set, err := gpu.Open(ctx, "cpu", gpu.WithStreams(4))
//	if err != nil { … }                  // unknown kind, bad stream count
//	defer set.Close()
//	dev := set.Devices()[0]
//
// A driver that can list its devices without opening them (gpu/opencl,
// kind "opencl") implements [Enumerator] too ([Enumerate] asks it by
// kind): what it lists, a lease backend can lease. A device gone for good
// is reported with an error matching [ErrDeviceLost] ([*LostError] from an
// inventory or health check, a driver's own device-loss error).
//
// The GPU inventory through NVML (which needs cgo) is package gpu/nvml,
// the only package that imports go-nvml; a program that needs only the
// CPU device or simulated GPUs builds dag, exec, gpu, gpu/cpu and gpu/sim
// with CGO_ENABLED=0.
//
// # Concurrency
//
// The registry and every device are safe for concurrent use; each
// type's doc says what may block.
package gpu
