package gpu

// ParkedForTest returns how many waiters are parked on c.
func (c *Counter) ParkedForTest() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ws)
}
