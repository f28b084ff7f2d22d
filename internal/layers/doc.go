// Package layers holds the test that keeps streamdag's package layering.
//
// A package imports only packages of lower layers (or of its own layer
// where the layering allows it), only gpu/nvml imports go-nvml, only tests
// import test doubles, and the packages a CPU-only user needs build with
// CGO_ENABLED=0. It has no API.
package layers
