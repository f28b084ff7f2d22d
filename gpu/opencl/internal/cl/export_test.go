package cl

// PendingForTest returns how many commands q holds unexamined.
func PendingForTest(q *Queue) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}
