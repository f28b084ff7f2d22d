package opencl_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/streamdag/streamdag/gpu/opencl"
)

// childEnv names the subprocess scenario a re-executed test binary runs
// instead of the tests (faults that may kill the process run there).
const childEnv = "STREAMDAG_OPENCL_CHILD"

// TestMain runs a subprocess scenario when childEnv is set. On a machine
// with no OpenCL device it runs only the TestHost tests (the others and
// the Example need a device) and says why; under CI it runs everything,
// so the device tests fail.
func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		f, ok := children[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown child %q\n", name)
			os.Exit(3)
		}
		os.Exit(f())
	}
	flag.Parse()
	if ds, err := opencl.Devices(); (err != nil || len(ds) == 0) && os.Getenv("CI") == "" {
		fmt.Fprintf(os.Stderr, "opencl: no OpenCL device (%v): running only the TestHost tests\n", err)
		_ = flag.Set("test.run", "^TestHost")
	}
	goleak.VerifyTestMain(m)
}
