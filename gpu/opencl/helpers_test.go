package opencl_test

import (
	"testing"

	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/gpu/opencl/internal/cltest"
)

// device returns this machine's first OpenCL device, or skips the test
// with the reason (fails it when CI is set: CI installs PoCL).
func device(t testing.TB) opencl.Info {
	t.Helper()
	ds, err := opencl.Devices()
	return cltest.First(t, ds, err)
}

const kernels = cltest.Kernels

// children are the subprocess scenarios: each returns the exit status.
var children = map[string]func() int{}

func runChild(t *testing.T, name string, env ...string) (string, error) {
	t.Helper()
	device(t)
	return cltest.RunChild(t, name, env...)
}

// errOf returns the error of a CodeStream enqueue, dropping its sequence
// number.
func errOf(_ uint64, err error) error { return err }
