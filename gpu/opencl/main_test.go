package opencl_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// childEnv names the subprocess scenario a re-executed test binary runs
// instead of the tests (faults that may kill the process run there).
const childEnv = "STREAMDAG_OPENCL_CHILD"

func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		f, ok := children[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown child %q\n", name)
			os.Exit(3)
		}
		os.Exit(f())
	}
	goleak.VerifyTestMain(m)
}
