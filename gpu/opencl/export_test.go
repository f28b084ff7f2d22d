package opencl

import "unsafe"

// FailUserEventForTest sets u's OpenCL status to st (negative) without
// completing it on the host: only for the subprocess tests that check
// how a device-reported failure is tracked.
func FailUserEventForTest(u *UserEvent, st int32) error {
	return check("clSetUserEventStatus", syscall(cl.setUserEventStatus, u.ev.h, uintptr(uint32(st))))
}

// PendingForTest returns how many commands q holds unexamined.
func PendingForTest(q *Queue) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

var _ = unsafe.Pointer(nil)
