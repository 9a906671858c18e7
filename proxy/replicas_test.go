package proxy_test

import (
	"encoding/json"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// TestTokenStateAcrossReplicas: an attempt's calls spread over two
// proxies on one store (gateway replicas: A, B, A, B, …) record exactly the
// prompt ids one proxy serving them all records, each call after the first
// continued from the previous call's stored ids, not re-rendered. The
// harness re-formats the tool arguments it sends back, so a re-render
// would differ from the continuation (checked).
func TestTokenStateAcrossReplicas(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	b := proxy.New(proxy.Config{}, e.st, proxy.NewTokenBackend(e.eng, e.tmpl, e.tmpl.Tokenizer(), 0))
	srvB := httptest.NewServer(b)
	t.Cleanup(srvB.Close)
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "calc", "parameters": map[string]any{"type": "object"}}}}
	replies := []chat.Message{toolCall("calc", `{"expr": "6 * 7"}`), toolCall("calc", `{ "expr" : "42 + 1" }`), text("43, after 42"), toolCall("calc", `{"expr":  "1"}`), text("done")}

	// run plays the conversation against the servers in turn and returns
	// the attempt's recorded calls.
	run := func(servers ...*httptest.Server) []api.ModelCall {
		cl := e.claim(t, store.ModeTrain)
		e.eng.Push(replies...)
		msgs := []map[string]any{{"role": "user", "content": "what is 6*7, plus one?"}}
		for i := range replies {
			srv := servers[i%len(servers)]
			m := chatTurn(t, base(srv, cl)+"/v1/chat/completions", cl.Key, msgs, map[string]any{"tools": tools})
			msgs = append(msgs, compactArgs(t, m))
			if tcs, ok := m["tool_calls"].([]any); ok {
				id := tcs[0].(map[string]any)["id"].(string)
				msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": id, "content": "42"})
			} else {
				msgs = append(msgs, map[string]any{"role": "user", "content": "go on"})
			}
		}
		return e.calls(t, cl)
	}
	single := run(e.srv)
	spread := run(e.srv, srvB)
	if len(single) != len(replies) || len(spread) != len(replies) {
		t.Fatalf("%d and %d calls recorded, want %d", len(single), len(spread), len(replies))
	}
	for i := range replies {
		s, r := single[i], spread[i]
		if !slices.Equal(s.PromptIDs, r.PromptIDs) {
			t.Errorf("call %d (on %s): prompt ids differ from the single-replica run's", i, []string{"A", "B"}[i%2])
		}
		if r.Continued != (i > 0) || s.Continued != (i > 0) {
			t.Errorf("call %d: continued %v (single-replica run: %v), want %v", i, r.Continued, s.Continued, i > 0)
		}
		if i > 0 {
			prev := append(slices.Clone(spread[i-1].PromptIDs), spread[i-1].ResponseIDs...)
			if !slices.Equal(r.PromptIDs[:len(prev)], prev) {
				t.Errorf("call %d: prompt does not extend call %d's prompt+response ids", i, i-1)
			}
		}
	}
	// The test can tell: a fresh render of the last conversation (the
	// harness's compacted arguments) is not what was recorded.
	var req struct {
		Messages []struct {
			Role      string `json:"role"`
			Content   any    `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
			ToolCallID string `json:"tool_call_id"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(spread[len(spread)-1].Request, &req); err != nil {
		t.Fatal(err)
	}
	conv := chat.Conversation{Tools: []chat.Tool{{Name: "calc", Parameters: json.RawMessage(`{"type":"object"}`)}}}
	for _, m := range req.Messages {
		msg := chat.Message{Role: m.Role, ToolCallID: m.ToolCallID}
		msg.Content, _ = m.Content.(string)
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		conv.Messages = append(conv.Messages, msg)
	}
	fresh, err := e.tmpl.Render(conv, true)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(fresh, spread[len(spread)-1].PromptIDs) {
		t.Fatal("a re-render equals the continuation: the test cannot tell them apart")
	}
}

// compactArgs re-formats an assistant message's tool arguments as a
// harness may (compact JSON): the same value, other text.
func compactArgs(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	tcs, _ := m["tool_calls"].([]any)
	for _, tc := range tcs {
		f := tc.(map[string]any)["function"].(map[string]any)
		var v any
		if err := json.Unmarshal([]byte(f["arguments"].(string)), &v); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(v)
		f["arguments"] = string(b)
	}
	return m
}
