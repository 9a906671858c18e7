package store

// Queued reports how many calls wait in g's queue (for tests).
func Queued(g *GroupCommit) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// TopFields is topFields for tests: how many of prompt_ids, response_ids
// and request it found, and the agent.
func TopFields(data []byte) (holes int, agent string, ok bool) {
	h, a, ok := topFields(data)
	return len(h), string(a), ok
}
