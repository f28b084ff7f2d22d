package mixed_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/internal/leaktest"
)

// TestMain skips the Example, which needs an OpenCL device, on a machine
// without one (running only TestReadmeProgram) and says why; under CI it
// runs, so it fails there.
func TestMain(m *testing.M) {
	flag.Parse()
	if ds, err := opencl.Devices(); (err != nil || len(ds) == 0) && os.Getenv("CI") == "" {
		fmt.Fprintf(os.Stderr, "mixed: no OpenCL device (%v; apt-get install pocl-opencl-icd ocl-icd-libopencl1): skipping the Example\n", err)
		_ = flag.Set("test.run", "^TestReadme")
	}
	leaktest.Main(m)
}
