package cl

import (
	"errors"
	"fmt"
	"strings"
)

// Status is an OpenCL status code (cl_int): 0 is CL_SUCCESS, negative
// values are errors. Its String is the code's name as the OpenCL headers
// spell it ("CL_OUT_OF_RESOURCES"), or "CL_ERROR(-n)" for a code this
// package does not know.
type Status int32

// The OpenCL status codes this package names (OpenCL 3.0 API
// specification, appendix "Error Codes", plus cl_khr_icd's
// CL_PLATFORM_NOT_FOUND_KHR).
const (
	Success                            Status = 0
	DeviceNotFound                     Status = -1
	DeviceNotAvailable                 Status = -2
	CompilerNotAvailable               Status = -3
	MemObjectAllocationFailure         Status = -4
	OutOfResources                     Status = -5
	OutOfHostMemory                    Status = -6
	ProfilingInfoNotAvailable          Status = -7
	BuildProgramFailure                Status = -11
	ExecStatusErrorForEventsInWaitList Status = -14
	InvalidValue                       Status = -30
	InvalidKernelName                  Status = -46
	InvalidKernelArgs                  Status = -52
	InvalidWorkGroupSize               Status = -54
	InvalidEventWaitList               Status = -57
	InvalidOperation                   Status = -59
	InvalidBufferSize                  Status = -61
	InvalidGlobalWorkSize              Status = -63
	PlatformNotFoundKHR                Status = -1001
)

var statusNames = map[Status]string{
	0: "CL_SUCCESS", -1: "CL_DEVICE_NOT_FOUND", -2: "CL_DEVICE_NOT_AVAILABLE",
	-3: "CL_COMPILER_NOT_AVAILABLE", -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE",
	-5: "CL_OUT_OF_RESOURCES", -6: "CL_OUT_OF_HOST_MEMORY", -7: "CL_PROFILING_INFO_NOT_AVAILABLE",
	-8: "CL_MEM_COPY_OVERLAP", -9: "CL_IMAGE_FORMAT_MISMATCH", -10: "CL_IMAGE_FORMAT_NOT_SUPPORTED",
	-11: "CL_BUILD_PROGRAM_FAILURE", -12: "CL_MAP_FAILURE", -13: "CL_MISALIGNED_SUB_BUFFER_OFFSET",
	-14: "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST", -15: "CL_COMPILE_PROGRAM_FAILURE",
	-16: "CL_LINKER_NOT_AVAILABLE", -17: "CL_LINK_PROGRAM_FAILURE", -18: "CL_DEVICE_PARTITION_FAILED",
	-19: "CL_KERNEL_ARG_INFO_NOT_AVAILABLE",
	-30: "CL_INVALID_VALUE", -31: "CL_INVALID_DEVICE_TYPE", -32: "CL_INVALID_PLATFORM",
	-33: "CL_INVALID_DEVICE", -34: "CL_INVALID_CONTEXT", -35: "CL_INVALID_QUEUE_PROPERTIES",
	-36: "CL_INVALID_COMMAND_QUEUE", -37: "CL_INVALID_HOST_PTR", -38: "CL_INVALID_MEM_OBJECT",
	-39: "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR", -40: "CL_INVALID_IMAGE_SIZE", -41: "CL_INVALID_SAMPLER",
	-42: "CL_INVALID_BINARY", -43: "CL_INVALID_BUILD_OPTIONS", -44: "CL_INVALID_PROGRAM",
	-45: "CL_INVALID_PROGRAM_EXECUTABLE", -46: "CL_INVALID_KERNEL_NAME", -47: "CL_INVALID_KERNEL_DEFINITION",
	-48: "CL_INVALID_KERNEL", -49: "CL_INVALID_ARG_INDEX", -50: "CL_INVALID_ARG_VALUE",
	-51: "CL_INVALID_ARG_SIZE", -52: "CL_INVALID_KERNEL_ARGS", -53: "CL_INVALID_WORK_DIMENSION",
	-54: "CL_INVALID_WORK_GROUP_SIZE", -55: "CL_INVALID_WORK_ITEM_SIZE", -56: "CL_INVALID_GLOBAL_OFFSET",
	-57: "CL_INVALID_EVENT_WAIT_LIST", -58: "CL_INVALID_EVENT", -59: "CL_INVALID_OPERATION",
	-60: "CL_INVALID_GL_OBJECT", -61: "CL_INVALID_BUFFER_SIZE", -62: "CL_INVALID_MIP_LEVEL",
	-63: "CL_INVALID_GLOBAL_WORK_SIZE", -64: "CL_INVALID_PROPERTY", -65: "CL_INVALID_IMAGE_DESCRIPTOR",
	-66: "CL_INVALID_COMPILER_OPTIONS", -67: "CL_INVALID_LINKER_OPTIONS",
	-68: "CL_INVALID_DEVICE_PARTITION_COUNT", -69: "CL_INVALID_PIPE_SIZE", -70: "CL_INVALID_DEVICE_QUEUE",
	-71: "CL_INVALID_SPEC_ID", -72: "CL_MAX_SIZE_RESTRICTION_EXCEEDED",
	-1001: "CL_PLATFORM_NOT_FOUND_KHR",
}

// String returns the code's name ("CL_OUT_OF_RESOURCES").
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("CL_ERROR(%d)", int32(s))
}

// Error is a failed OpenCL call: the function that returned a status
// other than CL_SUCCESS and that status. errors.Is(err, cl.Status(x))
// matches an *Error with that code.
type Error struct {
	Call string // the OpenCL function, "clEnqueueNDRangeKernel"
	Code Status
}

// Error returns "opencl: clCreateBuffer: CL_INVALID_BUFFER_SIZE (-61)".
func (e *Error) Error() string {
	return fmt.Sprintf("opencl: %s: %s (%d)", e.Call, e.Code, int32(e.Code))
}

// Is reports whether target is the Status e carries.
func (e *Error) Is(target error) bool {
	s, ok := target.(Status)
	return ok && s == e.Code
}

// Error makes a Status usable as an errors.Is target.
func (s Status) Error() string { return s.String() }

// check turns the cl_int a call returned into nil or an *Error.
func check(call string, r uintptr) error {
	if s := Status(int32(r)); s != Success {
		return &Error{Call: call, Code: s}
	}
	return nil
}

// Sentinel errors.
var (
	// ErrUnavailable: no OpenCL library (libOpenCL.so.1) could be loaded
	// or it lacks an OpenCL 1.2 entry point; wrapped with the reason.
	ErrUnavailable = errors.New("opencl: unavailable")
	// ErrNoPlatform: the library loaded but no platform (ICD) answered.
	ErrNoPlatform = errors.New("opencl: no platform")
	// ErrClosed: the Context, Queue or object was closed or released.
	ErrClosed = errors.New("opencl: closed")
)

// BuildError is a program that failed to build: its name, the device, the
// compiler's build log, and the OpenCL error (usually
// CL_BUILD_PROGRAM_FAILURE) as Err.
type BuildError struct {
	Program string // the name given to Context.Program
	Device  string // the device's name
	Log     string // the compiler's whole build log
	Err     error
}

// maxLogLines bounds the build log quoted in BuildError.Error.
const maxLogLines = 8

// Error names the program and device and quotes the first lines of the log.
func (e *BuildError) Error() string {
	lines := strings.Split(strings.TrimSpace(e.Log), "\n")
	more := ""
	if len(lines) > maxLogLines {
		more = fmt.Sprintf("\n(%d more lines)", len(lines)-maxLogLines)
		lines = lines[:maxLogLines]
	}
	why := fmt.Sprint(e.Err)
	var ce *Error
	if errors.As(e.Err, &ce) {
		why = fmt.Sprintf("%s: %v (%d)", ce.Call, ce.Code, int32(ce.Code))
	}
	return fmt.Sprintf("opencl: build program %q on %s: %s:\n%s%s", e.Program, e.Device, why, strings.Join(lines, "\n"), more)
}

// Unwrap returns the OpenCL error.
func (e *BuildError) Unwrap() error { return e.Err }

// CommandError is an enqueued command that the device reported failed
// after the fact (its event's execution status was negative). Seq is the
// command's position on its queue (the first command enqueued is 1), so a
// caller can map it back to the launch it made.
type CommandError struct {
	Device string // the device's name
	Queue  int    // Queue.Index
	Seq    uint64 // the command's sequence number on its queue
	Op     string // "launch vadd", "copy", "fill", "write", "read"
	Status Status // the negative execution status
}

// Error returns "opencl: pthread-…: queue 1 command 7 (launch vadd) failed: CL_OUT_OF_RESOURCES (-5)".
func (e *CommandError) Error() string {
	return fmt.Sprintf("opencl: %s: queue %d command %d (%s) failed: %s (%d)", e.Device, e.Queue, e.Seq, e.Op, e.Status, int32(e.Status))
}

// Is matches a Status target against the command's status.
func (e *CommandError) Is(target error) bool {
	s, ok := target.(Status)
	return ok && s == e.Status
}
