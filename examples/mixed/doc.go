// Package mixed is a runnable example of one DAG whose kernels run on two
// kinds of device.
//
// Go kernels run on the CPU device and an OpenCL C kernel on an OpenCL
// device (a GPU, or PoCL's OpenCL on the CPU cores), with the executor
// copying the buffers between them. The example is Example in the package's
// tests (go test -run Example -v ./examples/mixed/); the package itself has
// no API.
package mixed
