package failgraph

import (
	"fmt"
	"slices"
	"strings"

	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/encoding"
	"gonum.org/v1/gonum/graph/encoding/dot"
	"gonum.org/v1/gonum/graph/simple"

	"github.com/streamdag/streamdag/buffers"
)

// NodeKind says what a node of the exported error graph stands for.
type NodeKind uint8

const (
	// NodeFailure is a failure: its root kernel and error.
	NodeFailure NodeKind = iota
	// NodeSkip is a skipped launch of a kernel.
	NodeSkip
	// NodeBuffer is a buffer holding tainted bytes, or needed by a skip.
	NodeBuffer
)

// Node is a node of the exported error graph.
type Node struct {
	id      int64
	Kind    NodeKind
	Label   string    // failure "#1 source[1]: boom", kernel name, or buffer name
	Failure FailureID // the failure it belongs to (for buffers: the failure holding its first tainted byte)
}

// ID implements graph.Node.
func (n *Node) ID() int64 { return n.id }

// DOTID names the node in DOT.
func (n *Node) DOTID() string {
	switch n.Kind {
	case NodeFailure:
		return fmt.Sprintf("failure %s", n.Failure)
	case NodeSkip:
		return "kernel " + n.Label
	}
	return "buffer " + n.Label
}

// Attributes styles failures as red octagons, skipped kernels as grey
// boxes and buffers as ellipses.
func (n *Node) Attributes() []encoding.Attribute {
	quote := func(s string) string {
		return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
	}
	switch n.Kind {
	case NodeFailure:
		return []encoding.Attribute{{Key: "shape", Value: "octagon"}, {Key: "color", Value: "red"}, {Key: "label", Value: quote(n.Label)}}
	case NodeSkip:
		return []encoding.Attribute{{Key: "shape", Value: "box"}, {Key: "style", Value: "dashed"}, {Key: "label", Value: quote(n.Label + " (skipped)")}}
	}
	return []encoding.Attribute{{Key: "shape", Value: "ellipse"}, {Key: "label", Value: quote(n.Label)}}
}

// Graph returns the error graph as a gonum directed graph: an edge from a
// failure to each buffer it taints directly (its root kernel's writes) and
// to each buffer that inherits it, an edge from a needed buffer to the
// skipped kernel that needed it, and from a skipped kernel to the buffers
// it would have written. Nodes are *Node. It is a snapshot: later changes
// to the store do not show.
func (s *Store) Graph() graph.Directed {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := simple.NewDirectedGraph()
	bufNode := map[buffers.ID]*Node{}
	add := func(n *Node) *Node {
		n.id = g.NewNode().ID()
		g.AddNode(n)
		return n
	}
	buffer := func(id buffers.ID, f FailureID) *Node {
		if n, ok := bufNode[id]; ok {
			return n
		}
		n := add(&Node{Kind: NodeBuffer, Label: s.names(id), Failure: f})
		bufNode[id] = n
		return n
	}
	ids := make([]FailureID, 0, len(s.failures))
	for id := range s.failures {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		n := s.failures[id]
		fn := add(&Node{Kind: NodeFailure, Failure: id, Label: fmt.Sprintf("%s %s: %v", id, n.kernel, firstLine(n.root))})
		for _, b := range s.sortedBuffers() {
			if s.holds(b, id) {
				g.SetEdge(g.NewEdge(fn, buffer(b, id)))
			}
		}
		skipNode := map[string]*Node{} // one node per skipped kernel of this failure
		for _, k := range n.skips {
			kn, ok := skipNode[k.Kernel]
			if !ok {
				kn = add(&Node{Kind: NodeSkip, Label: k.Kernel, Failure: id})
				skipNode[k.Kernel] = kn
			}
			g.SetEdge(g.NewEdge(buffer(k.Needed.Buffer, id), kn))
			for _, p := range k.Produced {
				if p.Buffer != k.Needed.Buffer {
					g.SetEdge(g.NewEdge(kn, buffer(p.Buffer, id)))
				}
			}
		}
	}
	return g
}

// MarshalDOT returns Graph in Graphviz DOT.
func (s *Store) MarshalDOT() ([]byte, error) {
	return dot.Marshal(s.Graph(), "errors", "", "  ")
}

func (s *Store) sortedBuffers() []buffers.ID {
	var ids []buffers.ID
	for id := range s.spans {
		ids = append(ids, id)
	}
	for id := range s.unalloc {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// holds reports whether failure f claims bytes of (or the reservation of)
// buffer b. Caller holds mu.
func (s *Store) holds(b buffers.ID, f FailureID) bool {
	if u, ok := s.unalloc[b]; ok && u == f {
		return true
	}
	for _, sp := range s.spans[b] {
		if sp.f == f {
			return true
		}
	}
	return false
}

func firstLine(err error) string {
	if err == nil {
		return "<nil>"
	}
	line, _, _ := strings.Cut(err.Error(), "\n")
	return line
}
