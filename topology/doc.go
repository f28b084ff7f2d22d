// Package topology describes devices and the links between them. It is
// layer 0 of streamdag: it imports nothing else from the module.
//
// This first version holds device identities ([DeviceID]) and device facts
// ([Device]), including the host CPU device's description ([CPUDevice]).
// Links (NV#, PIX, PXB, PHB, NODE, SYS), the P2P matrix and transfer costs
// come later behind the same types.
//
// All types here are plain values: safe to copy and to share between
// goroutines once built.
package topology
