package store

// Queued reports how many calls wait in g's queue (for tests).
func Queued(g *GroupCommit) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}
