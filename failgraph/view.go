package failgraph

import (
	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/encoding/dot"
	"gonum.org/v1/gonum/graph/simple"

	"github.com/streamdag/streamdag/buffers"
)

// View is a read-only view of a Store: the read check, copies of the
// failures and the exported graph, and no call that taints or releases a
// byte. A finished run hands out a View of its error graph, so that no
// caller can clear the taint that keeps failed work from being read as
// valid. A View reads its store live: when the store is still in use, a
// later call sees later changes.
//
// The zero View is an empty graph: nothing tainted, no failure. A View is
// a small value, safe to copy and for concurrent use.
type View struct {
	s *Store
}

// View returns a read-only view of s.
func (s *Store) View() View { return View{s: s} }

// EnsureWritten is Store.EnsureWritten: nil when every byte of reads was
// last written by work that succeeded, else one *UnwrittenError per
// failure found and an ErrNeverAllocated error per buffer never
// allocated (joined when there are several).
func (v View) EnsureWritten(reads ...buffers.Binding) error {
	if v.s == nil {
		return nil
	}
	return v.s.EnsureWritten(reads...)
}

// Failure returns a copy of failure id, or false when it is not (or no
// longer) in the graph.
func (v View) Failure(id FailureID) (Failure, bool) {
	if v.s == nil {
		return Failure{}, false
	}
	return v.s.Failure(id)
}

// Failures returns a copy of every failure in the graph, in id order.
func (v View) Failures() []Failure {
	if v.s == nil {
		return []Failure{}
	}
	return v.s.Failures()
}

// Len returns the number of failures in the graph.
func (v View) Len() int {
	if v.s == nil {
		return 0
	}
	return v.s.Len()
}

// Empty reports whether nothing is tainted and no capture window is open
// (see Store.Empty).
func (v View) Empty() bool { return v.s == nil || v.s.Empty() }

// Graph returns a snapshot of the error graph as a gonum directed graph
// (see Store.Graph).
func (v View) Graph() graph.Directed {
	if v.s == nil {
		return simple.NewDirectedGraph()
	}
	return v.s.Graph()
}

// MarshalDOT returns Graph in Graphviz DOT.
func (v View) MarshalDOT() ([]byte, error) {
	return dot.Marshal(v.Graph(), "errors", "", "  ")
}
