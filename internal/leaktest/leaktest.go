// Package leaktest holds test helpers shared across streamdag's packages:
// goroutine leak checks and checked allocators.
package leaktest

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"go.uber.org/goleak"
)

// Main runs the package's tests and fails the run if any goroutine is left
// behind. Use it from TestMain: func TestMain(m *testing.M) { leaktest.Main(m) }.
func Main(m *testing.M) { goleak.VerifyTestMain(m) }

// Allocator returns an arrow checked allocator over the Go allocator and
// registers a cleanup that fails t if any byte is still allocated when the
// test ends.
func Allocator(t testing.TB) *memory.CheckedAllocator {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	return mem
}
