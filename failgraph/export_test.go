package failgraph

import "github.com/streamdag/streamdag/buffers"

// Span is a tainted byte range as the tests see it.
type Span struct {
	Off, End int64
	Failure  FailureID
	By       string
}

// Spans returns the tainted spans of buffer id, in offset order.
func (s *Store) Spans(id buffers.ID) []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Span
	for _, sp := range s.spans[id] {
		out = append(out, Span{Off: sp.off, End: sp.end, Failure: sp.f, By: sp.by})
	}
	return out
}

// Counts returns the lock-free span counter and the number of spans the
// store actually holds, which must agree.
func (s *Store) Counts() (counter int64, spans int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sps := range s.spans {
		spans += len(sps)
	}
	return s.tainted.Load(), spans
}
