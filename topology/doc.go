// Package topology describes devices and the links between them, and
// models what moving bytes between them costs. It is layer 0 of
// streamdag: it imports nothing else from the module (gonum for graphs).
//
// Devices: [DeviceID] ("cpu", "gpu0", …) and [DeviceFacts], including
// the host CPU device ([CPUDevice]).
//
// Links: for each ordered GPU pair a [LinkKind] in the words of
// `nvidia-smi topo -m` (NV# with its NVLink count, PIX, PXB, PHB, NODE,
// SYS — SOC on older drivers — X for self, none when unknown) and, as a
// separate fact per direction, its [P2P] status (read, write, NVLink,
// atomics), because a SYS pair can have P2P and a PHB pair can lack it.
//
// Sources: [ParseMatrix] reads `nvidia-smi topo -m`, [ParseP2P] reads
// `nvidia-smi topo -p2p r|w|n|a` (merged with [Facts.ApplyP2P]),
// [ParseJSON] a JSON description; the gpu package fills [Facts] from its
// inventory. Bad input gets a [*ParseError] naming line and column; no
// parser panics. [New] builds a [Topology] from Facts.
//
// Model: each GPU gets a [GPUSpec] (NVLink generation and per-link rate,
// PCIe generation) from an option (the CLI's --gpu), its compute
// capability, its name, or [DefaultSpec] (A100), and [Topology.GPUSpec]
// says which. NVLink bandwidth = links × per-link rate (P100 20, V100 25,
// A100 25, H100 25, B200 50 GB/s per direction; GA102 bridge 14.0625);
// PCIe = the x16 rate of the generation (Gen3 15.75, Gen4 31.5, Gen5 63
// GB/s per direction) × 1 under switches (PIX, PXB), 0.8 through the host
// bridge (PHB), 0.5 across host bridges (NODE), 0.25 across sockets (SYS).
// Without P2P a copy is staged device → host → device. Sources are cited
// on [GPUSpec]; the latencies are estimates (see [Link]).
//
// Costs: [Topology.Route] picks the cheapest of the direct hop, two hops
// via one other GPU and the staged copy through the host;
// [Topology.TransferCost] is its time as a [time.Duration] (nanoseconds).
// [Topology.Graph] gives the same hops as a gonum weighted directed graph
// whose weights are seconds, so gonum's path algorithms apply.
//
// Units: bytes are int64 bytes; bandwidths are float64 bytes per second
// per direction (fields named ...Bps; 1 GB/s = 1e9 B/s); times are
// time.Duration.
//
// All types here are plain values or immutable after construction: safe
// to copy and to share between goroutines once built. [Specs] and
// [DefaultSpec] are read-only tables.
package topology
