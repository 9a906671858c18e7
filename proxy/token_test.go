package proxy

import (
	"testing"

	"github.com/aglrl/agl/chat"
)

func TestTokenStateBounds(t *testing.T) {
	b := NewTokenBackend(nil, nil, nil, 3)
	br := func(n int, content string) *branch {
		return &branch{msgs: []chat.Message{{Role: "user", Content: content}, {Role: "assistant", Content: "x"}}, ids: make([]int32, n)}
	}
	b.remember("a", br(10, "1"))
	b.remember("b", br(10, "1"))
	b.remember("a", br(5, "2")) // a second conversation of a
	if b.totalIDs != 25 || len(b.states) != 2 {
		t.Fatalf("total %d, %d attempts", b.totalIDs, len(b.states))
	}
	b.remember("c", br(10, "1"))
	b.remember("d", br(10, "1")) // over maxAttempts: b (least recent) goes
	if _, ok := b.states["b"]; ok || len(b.states) != 3 || b.totalIDs != 35 {
		t.Fatalf("after eviction: %d attempts, total %d", len(b.states), b.totalIDs)
	}
	b.SetMaxStateIDs(20)
	b.remember("e", br(10, "1")) // over the id budget: a, c go
	if len(b.states) != 2 || b.totalIDs != 20 {
		t.Fatalf("after id budget: %d attempts, total %d", len(b.states), b.totalIDs)
	}
	b.Forget(Target{RolloutID: "x", AttemptID: "y"}) // unknown: no-op
	if len(b.states) != 2 {
		t.Fatal("forget of an unknown attempt changed the state")
	}
	b.SetMaxStateIDs(1000)
	tg := Target{RolloutID: "r", AttemptID: "a"}
	b.remember(tg.key(), br(3, "1"))
	b.Forget(tg)
	if _, ok := b.states[tg.key()]; ok || b.totalIDs != 20 {
		t.Fatalf("after forget: total %d", b.totalIDs)
	}
}

func TestMessagesExtend(t *testing.T) {
	gen := []chat.Message{
		{Role: "user", Content: "hi"},
		{Role: "assistant", Content: "ok\n", Reasoning: "hmm", ToolCalls: []chat.ToolCall{{ID: "call_1", Name: "f", Arguments: `{"a": 1, "b": [2]}`}}},
	}
	for _, c := range []struct {
		name string
		got  []chat.Message
		want bool
	}{
		{"same", gen, true},
		{"reasoning dropped, args re-serialized, id changed", []chat.Message{gen[0], {Role: "assistant", Content: "ok", ToolCalls: []chat.ToolCall{{ID: "toolu_9", Name: "f", Arguments: `{"b":[2],"a":1}`}}}}, true},
		{"user edited", []chat.Message{{Role: "user", Content: "hi!"}, gen[1]}, false},
		{"args changed", []chat.Message{gen[0], {Role: "assistant", Content: "ok", ToolCalls: []chat.ToolCall{{Name: "f", Arguments: `{"a":2,"b":[2]}`}}}}, false},
		{"tool call dropped", []chat.Message{gen[0], {Role: "assistant", Content: "ok"}}, false},
		{"role changed", []chat.Message{{Role: "system", Content: "hi"}, gen[1]}, false},
	} {
		if got := messagesExtend(c.got, gen); got != c.want {
			t.Errorf("%s: %v", c.name, got)
		}
	}
}
