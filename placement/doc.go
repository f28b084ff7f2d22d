// Package placement chooses the device each kernel runs on (layer 3, below
// exec).
//
// It is streamdag's one placement engine: it chooses devices for kernels
// over a small model of candidate devices (their facts and loads, their
// lanes, which kernels' code each runs), per-kernel compute estimates, pins
// and preferences, and transfer costs from a topology.
//
// It has two front-ends over the same strategies ([Strategy]):
//
//   - [Place] places every kernel of a validated dag.Graph at once: HEFT
//     (Topcuoglu, Hariri and Wu 2002) with local search, round-robin or
//     least-loaded, over the cost model documented there; [Optimal] is the
//     exhaustive optimum of the same model, for measuring heuristics. The
//     executor's planner calls Place.
//   - [Coordinator] tracks devices and kernels that come and go one at a
//     time, with the strategies of RingKernel's MultiGpuCoordinator:
//     register and unregister devices, select a device by strategy (first-available,
//     least-loaded, round-robin, memory-based, compute-capability,
//     topology-aware, custom), assign and remove kernels, status and
//     stats, P2P from the topology, migration requests.
//
// [Spread] is the migration planner both the Coordinator's Unregister and
// the executor's recovery from a lost device use: it spreads a device's
// kernels over the survivors that can run them, counting its own moves.
//
// The package imports dag and topology only: no driver, no executor.
// Place, Optimal and Spread are functions of their arguments (safe for
// concurrent use on shared, unchanging inputs); a Coordinator is safe for
// concurrent use. Nothing here starts a goroutine.
package placement
