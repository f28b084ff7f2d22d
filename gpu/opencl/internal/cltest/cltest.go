// Package cltest holds the fixtures the OpenCL binding's tests and the
// OpenCL driver's tests share.
//
// They are the test kernels, the device lookup that
// skips a test on a machine without OpenCL (and fails it under CI), the
// subprocess scenarios for faults that may kill the process, and the
// TestMain that runs them. It is imported by tests only.
package cltest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	osexec "os/exec"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"
)

// Kernels is the OpenCL C the tests build: vadd, produce (a slow
// producer), consume, handshake (two kernels that see each other run)
// and touch.
const Kernels = `
__kernel void vadd(__global const float *a, __global const float *b, __global float *c, uint n) {
	size_t i = get_global_id(0);
	if (i < n) c[i] = a[i] + b[i];
}

// produce spins, then writes v to every element: a slow producer.
__kernel void produce(__global int *buf, int v, long spins) {
	for (volatile long i = 0; i < spins; i++) {}
	buf[get_global_id(0)] = v;
}

__kernel void consume(__global const int *in, __global int *out) {
	size_t i = get_global_id(0);
	out[i] = in[i] * 2 + 1;
}

// handshake raises flags[me], then waits (at most spins loads) for
// flags[other]; result[me] is 1 only if the other kernel ran meanwhile.
__kernel void handshake(__global volatile int *flags, int me, int other, long spins, __global int *result) {
	flags[me] = 1;
	mem_fence(CLK_GLOBAL_MEM_FENCE);
	long i = 0;
	while (flags[other] == 0 && i < spins) i++;
	result[me] = i < spins ? 1 : 0;
}

__kernel void touch(__global int *p) { p[get_global_id(0)] += 1; }
`

// First returns ds[0]; with err or no device it skips t with the reason,
// or fails it when CI is set (CI installs PoCL).
func First[D any](t testing.TB, ds []D, err error) D {
	t.Helper()
	if err == nil && len(ds) == 0 {
		err = errors.New("no OpenCL device on any platform")
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("OpenCL needed under CI (.ci/run installs pocl-opencl-icd): %v", err)
		}
		t.Skipf("no OpenCL here: %v", err)
	}
	return ds[0]
}

// BytesOf returns the bytes of s, sharing its memory.
func BytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// ErrString returns err's message, or "no error" for nil.
func ErrString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// childEnv names the subprocess scenario a re-executed test binary runs
// instead of the tests (faults that may kill the process run there).
const childEnv = "STREAMDAG_OPENCL_CHILD"

// RunChild re-executes the test binary to run the subprocess scenario
// name (a key of the children given to Main), with env added to this
// process's environment, and returns its combined output and exit error.
func RunChild(t *testing.T, name string, env ...string) (string, error) {
	t.Helper()
	// The deadline only stops a hung child; it decides nothing.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := osexec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+name), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Main is a TestMain: in a re-executed binary it runs the scenario of
// children RunChild named and exits with its status; otherwise, on a
// machine where devices reports none (or an error) and CI is not set, it
// runs only the TestHost tests (the others and the Examples need a
// device) and says why; then the tests, with goleak's check after them.
func Main(m *testing.M, children map[string]func() int, devices func() (int, error)) {
	if name := os.Getenv(childEnv); name != "" {
		f, ok := children[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown child %q\n", name)
			os.Exit(3)
		}
		os.Exit(f())
	}
	flag.Parse()
	if n, err := devices(); (err != nil || n == 0) && os.Getenv("CI") == "" {
		fmt.Fprintf(os.Stderr, "opencl: no OpenCL device (%v): running only the TestHost tests\n", err)
		_ = flag.Set("test.run", "^TestHost")
	}
	goleak.VerifyTestMain(m)
}
