package failgraph

import "github.com/streamdag/streamdag/buffers"

// Span is a tainted byte range as the tests see it.
type Span struct {
	Off, End int64
	Failure  FailureID
}

// Spans returns the tainted spans of buffer id, in offset order.
func (s *Store) Spans(id buffers.ID) []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Span
	for _, sp := range s.spans[id] {
		out = append(out, Span{Off: sp.off, End: sp.end, Failure: sp.f})
	}
	return out
}

// Counts returns the lock-free taint counter and what the store actually
// holds (spans plus unallocated records), which must agree.
func (s *Store) Counts() (counter int64, held int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sps := range s.spans {
		held += len(sps)
	}
	return s.tainted.Load(), held + len(s.unalloc)
}
