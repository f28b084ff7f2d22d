// Package k2k moves kernel-to-kernel messages between devices (layer 3,
// beside exec): a [Router] takes a message from kernel A to kernel B,
// where each kernel's device is what a placement.Coordinator has it
// assigned to, chooses the route from the Coordinator's topology, queues
// the message per (source device, destination device) pair, and, when the
// pair is drained, moves the payload's bytes along the route through the
// gpu contract's streams and copies, into the destination device's
// memory, and hands it to the destination kernel's [Handler].
//
// Routes (topology.RouteKind), in the order the Router tries them:
//
//   - same: both kernels are on one device; nothing moves.
//   - direct: one hop. Between two GPUs, a peer-to-peer copy when the
//     Coordinator's CanP2P holds for the pair (the topology says P2P
//     works and P2P is not disabled); between the host CPU device and any
//     other device, the copy over the device's host link.
//   - via-gpu: two peer-to-peer hops through an intermediate GPU, when no
//     direct P2P exists and the pair of hops costs strictly less than the
//     staged copy through host memory for the payload's size (the
//     topology's transfer model); among several, the cheapest, ties to the
//     lowest GPU index.
//   - via-host: device → host memory → device: everything else (a pair
//     without P2P, two OpenCL devices, a GPU the topology does not know,
//     no topology).
//
// A peer hop needs a copy between two devices' memories, which the gpu
// contract has only where both memories are host-addressable (the CPU
// device and simulated GPUs); between code devices (OpenCL: no P2P
// between contexts) and across a code device and a GPU the route goes
// through the host whatever the topology says.
//
// Compared with RingKernel's CrossGpuK2KRouter, which this follows:
//
//   - A message between two kernels of one device is queued and
//     delivered as any other; the seed answers SameDevice and queues
//     nothing, leaving the delivery to its caller.
//   - A message is queued under its endpoint pair whatever its route;
//     the seed queues a multi-hop message under its first hop, so
//     draining the endpoint pair misses it.
//   - An intermediate GPU counts only when both of its hops are usable
//     P2P links and the two hops beat the host; the seed counts any
//     stored connection (one of type none included) and prefers any
//     multi-hop path to the host.
//   - Kept from the seed: a direct P2P link is taken even when a two-hop
//     path would be cheaper (one copy, no intermediate memory).
//   - A delivery re-checks the destination when its Drain reaches it, so
//     a message to a kernel removed or moved meanwhile, or whose device
//     was unregistered, fails and is recorded instead of landing on a
//     device the kernel left.
//   - Latency is kept per route kind, from queueing to delivery; the seed
//     keeps one total.
//
// Ownership: the caller owns the Coordinator and the devices and closes
// the devices after the Router's Close. The Router owns every payload it
// holds (in host memory from its allocator, or device memory from
// gpu.CodeDevice.Alloc) and releases each once delivered, failed or
// dropped by Close. Every method is safe for concurrent use.
package k2k
