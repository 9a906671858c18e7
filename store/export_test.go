package store

// Queued reports how many calls wait in g's queue (for tests).
func Queued(g *GroupCommit) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
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
