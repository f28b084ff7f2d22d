package gpu

// ResetOwnerForTest frees the process's backend owner lease. Only tests of
// the fail-closed rule use it, to let later tests build a backend again.
func ResetOwnerForTest() { releaseOwner() }

// ParkedForTest returns how many waiters are parked on c.
func (c *Counter) ParkedForTest() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ws)
}
