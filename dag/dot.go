package dag

import "gonum.org/v1/gonum/graph/encoding/dot"

// MarshalDOT returns the graph in Graphviz DOT: kernels as boxes, buffers
// as ellipses (inputs as double circles) labelled with their size, edges
// buffer→kernel for reads and kernel→buffer for writes. The output is
// deterministic for a given graph. name is the DOT graph's name.
func (g *Graph) MarshalDOT(name string) ([]byte, error) {
	return dot.Marshal(g.directed(), name, "", "  ")
}
