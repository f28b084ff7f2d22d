package opencl_test

import (
	"testing"

	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/gpu/opencl/internal/cltest"
)

// TestMain runs a subprocess scenario of children when the binary is
// re-executed for one, and on a machine with no OpenCL device only the
// TestHost tests (see cltest.Main).
func TestMain(m *testing.M) {
	cltest.Main(m, children, func() (int, error) {
		ds, err := opencl.Devices()
		return len(ds), err
	})
}
