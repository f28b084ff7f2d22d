package failgraph

import (
	"errors"
	"fmt"

	"github.com/streamdag/streamdag/buffers"
)

// ErrTornDown is the provisional error of a write scope: the work that was
// to write these bytes did not finish (errors.Is matches a KernelPanicError).
var ErrTornDown = errors.New("failgraph: torn down")

// KernelPanicError is the root error a write scope leaves when the kernel inside
// it panicked (or called runtime.Goexit, for which the executor gives the
// Value "runtime.Goexit"): the write set stays failing, "torn down", with
// the panic's value and stack. errors.Is(err, ErrTornDown) matches it, and
// errors.As finds it from a read of the bytes it left unwritten.
type KernelPanicError struct {
	Kernel string
	Value  any    // the panic value
	Stack  []byte // the panicking goroutine's stack, as debug.Stack gives it
}

// Error returns `kernel "NAME" panicked: VALUE`; the stack is in Stack,
// not in the message. It has no package prefix: the executor wraps it
// ("exec: kernel ...").
func (e *KernelPanicError) Error() string {
	return fmt.Sprintf("kernel %q panicked: %v", e.Kernel, e.Value)
}

// Is matches ErrTornDown.
func (e *KernelPanicError) Is(target error) bool { return target == ErrTornDown }

// Unwrap returns the panic value when it is an error, so errors.Is and
// errors.As see through the panic; otherwise nil.
func (e *KernelPanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Scope is a write scope over one launch's write set: "tainted unless
// proven written". Enter it before the work runs and settle it exactly
// once with Exit (the work returned) or ExitPanic (it panicked).
//
// The provisional "torn down" taint is materialised when the scope is
// settled without success, not at Enter: every reader of the write set is
// ordered after the scope by the executor's streams and events, and the
// host reads results only after the run returned, so no reader can observe
// the difference, and the clean path stays free of locks and allocations.
// A scope that is never settled is a programmer error.
//
// Scope is a small value; copying it is fine, settling a copy twice is
// not.
type Scope struct {
	s      *Store
	kernel string
	writes []buffers.Binding
}

// Enter opens a write scope for kernel over writes. It allocates nothing.
func (s *Store) Enter(kernel string, writes []buffers.Binding) Scope {
	return Scope{s: s, kernel: kernel, writes: writes}
}

// Exit settles the scope: nil err releases the write set (the work
// succeeded, Written); a non-nil err mints a failure with err as its root
// and taints the write set with it. It returns the failure id (0 on
// success).
func (sc Scope) Exit(err error) FailureID {
	if err == nil {
		sc.s.Written(sc.writes)
		return 0
	}
	return sc.s.Fail(sc.kernel, err, sc.writes)
}

// ExitPanic settles the scope of work that panicked with value v: the
// write set stays "torn down" with a *KernelPanicError carrying v and stack.
func (sc Scope) ExitPanic(v any, stack []byte) FailureID {
	return sc.s.Fail(sc.kernel, &KernelPanicError{Kernel: sc.kernel, Value: v, Stack: stack}, sc.writes)
}
