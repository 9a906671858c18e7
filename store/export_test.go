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

// LayoutOf returns the layout of a model_request event's JSON, as its
// writer would give it (for tests and benchmarks).
func LayoutOf(data []byte) *CallLayout {
	holes, agent, _ := topFields(data)
	l := &CallLayout{Agent: string(agent)}
	for _, h := range holes {
		sp := [2]int{h.start, h.end}
		switch h.kind {
		case holePromptIDs:
			l.PromptIDs = sp
		case holeResponseIDs:
			l.ResponseIDs = sp
		default:
			l.Request = sp
		}
	}
	return l
}
