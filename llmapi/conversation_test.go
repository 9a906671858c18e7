package llmapi

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/aglrl/agl/api"
)

// TestParseCall: each shape's request and response in the common shape,
// hand-checked: roles, text parts, reasoning, tool calls and their
// results (error marks included), declared tools, the reply.
func TestParseCall(t *testing.T) {
	tests := []struct {
		name      string
		shape     string
		req, resp string
		want      Call
		err       string
	}{
		{"chat", api.ShapeChatCompletions,
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"developer","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]},` +
				`{"role":"user","content":"Sum?"},` +
				`{"role":"assistant","content":null,"reasoning_content":"use calc","tool_calls":[{"id":"call_1","type":"function","function":{"name":"calc","arguments":"{\"x\": 1}"}}]},` +
				`{"role":"tool","tool_call_id":"call_1","name":"calc","content":"Error: no x"}],` +
				`"tools":[{"type":"function","function":{"name":"calc","parameters":{"type":"object"}}}]}`,
			`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"2","reasoning_content":"again","tool_calls":[{"id":"call_2","type":"function","function":{"name":"calc","arguments":"{}"}}]},"logprobs":null,"finish_reason":"tool_calls"}]}`,
			Call{Messages: []Message{
				{Role: "system", Text: "Be brief."},
				{Role: "developer", Text: "a[image_url]"},
				{Role: "user", Text: "Sum?"},
				{Role: "assistant", Reasoning: "use calc", ToolCalls: []ToolCall{{ID: "call_1", Name: "calc", Arguments: `{"x": 1}`}}},
				{Role: "tool", ToolCallID: "call_1", Name: "calc", Text: "Error: no x"},
			}, Tools: []string{"calc"},
				Reply: &Message{Role: "assistant", Text: "2", Reasoning: "again", ToolCalls: []ToolCall{{ID: "call_2", Name: "calc", Arguments: "{}"}}}}, ""},
		{"completion, a prompt list", api.ShapeCompletions, `{"model":"m","prompt":["one","two"]}`, `{"choices":[{"text":" three","finish_reason":"stop"}]}`,
			Call{Messages: []Message{{Role: "user", Text: "one\ntwo"}}, Reply: &Message{Role: "assistant", Text: " three"}}, ""},
		{"responses", api.ShapeResponses,
			`{"model":"m","instructions":"Use tools.","input":[{"role":"user","content":[{"type":"input_text","text":"Patch it."}]},` +
				`{"type":"reasoning","summary":[{"type":"summary_text","text":"plan"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"On it."}]},` +
				`{"type":"function_call","call_id":"fc_1","name":"shell","arguments":"{\"cmd\":\"ls\"}"},{"type":"custom_tool_call","call_id":"ct_1","name":"apply_patch","input":"*** Begin"},` +
				`{"type":"function_call_output","call_id":"fc_1","output":"a.go"},{"type":"custom_tool_call_output","call_id":"ct_1","output":"error: bad patch"},{"type":"item_reference","id":"x"}],` +
				`"tools":[{"type":"function","name":"shell"},{"type":"custom","name":"apply_patch"}]}`,
			`{"id":"resp_1","object":"response","status":"completed","output":[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"retry"}]},` +
				`{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Again.","annotations":[]}]},{"type":"function_call","id":"fc","call_id":"fc_2","name":"shell","arguments":"{}"}]}`,
			Call{Messages: []Message{
				{Role: "system", Text: "Use tools."},
				{Role: "user", Text: "Patch it."},
				{Role: "assistant", Text: "On it.", Reasoning: "plan", ToolCalls: []ToolCall{{ID: "fc_1", Name: "shell", Arguments: `{"cmd":"ls"}`}, {ID: "ct_1", Name: "apply_patch", Arguments: "*** Begin"}}},
				{Role: "tool", ToolCallID: "fc_1", Text: "a.go"},
				{Role: "tool", ToolCallID: "ct_1", Text: "error: bad patch"},
				{Role: "user", Text: "[item_reference]"},
			}, Tools: []string{"shell", "apply_patch"},
				Reply: &Message{Role: "assistant", Text: "Again.", Reasoning: "retry", ToolCalls: []ToolCall{{ID: "fc_2", Name: "shell", Arguments: "{}"}}}}, ""},
		{"responses, a string input", api.ShapeResponses, `{"input":"Hi"}`, `{"output":[]}`,
			Call{Messages: []Message{{Role: "user", Text: "Hi"}}}, ""},
		{"anthropic", api.ShapeMessages,
			`{"model":"m","max_tokens":9,"system":[{"type":"text","text":"Be brief."}],"messages":[{"role":"user","content":"Sum?"},` +
				`{"role":"assistant","content":[{"type":"thinking","thinking":"use calc","signature":""},{"type":"text","text":"Let me."},{"type":"tool_use","id":"toolu_1","name":"calc","input":{"x":1}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","is_error":true,"content":[{"type":"text","text":"no x"}]},{"type":"text","text":"Go on."}]}],` +
				`"tools":[{"name":"calc","input_schema":{"type":"object"}}]}`,
			`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"thinking","thinking":"retry","signature":""},{"type":"text","text":"ok"},{"type":"tool_use","id":"toolu_2","name":"calc","input":{}}],"stop_reason":"tool_use"}`,
			Call{Messages: []Message{
				{Role: "system", Text: "Be brief."},
				{Role: "user", Text: "Sum?"},
				{Role: "assistant", Text: "Let me.", Reasoning: "use calc", ToolCalls: []ToolCall{{ID: "toolu_1", Name: "calc", Arguments: `{"x":1}`}}},
				{Role: "tool", ToolCallID: "toolu_1", Text: "no x", IsError: true},
				{Role: "user", Text: "Go on."},
			}, Tools: []string{"calc"},
				Reply: &Message{Role: "assistant", Text: "ok", Reasoning: "retry", ToolCalls: []ToolCall{{ID: "toolu_2", Name: "calc", Arguments: "{}"}}}}, ""},
		{"gemini", api.ShapeGenerateContent,
			`{"systemInstruction":{"parts":[{"text":"Be"},{"text":"brief."}]},"contents":[{"role":"user","parts":[{"text":"Sum?"},{"text":"Now."}]},` +
				`{"role":"model","parts":[{"text":"use calc","thought":true},{"text":"Let me."},{"functionCall":{"id":"call_1","name":"calc","args":{"x":1}}},{"functionCall":{"name":"ls"}}]},` +
				`{"role":"user","parts":[{"functionResponse":{"id":"call_1","name":"calc","response":{"error":"no x"}}},{"functionResponse":{"name":"ls","response":{"output":"a.go"}}},{"functionResponse":{"name":"ls","response":{"files":["a.go"], "n": 1}}}]}],` +
				`"tools":[{"functionDeclarations":[{"name":"calc"},{"name":"ls"}]}]}`,
			`{"candidates":[{"content":{"role":"model","parts":[{"text":"retry","thought":true},{"text":"ok"},{"functionCall":{"id":"call_2","name":"calc","args":{}}}]},"finishReason":"STOP","index":0}]}`,
			Call{Messages: []Message{
				{Role: "system", Text: "Be\nbrief."},
				{Role: "user", Text: "Sum?\nNow."},
				{Role: "assistant", Text: "Let me.", Reasoning: "use calc", ToolCalls: []ToolCall{{ID: "call_1", Name: "calc", Arguments: `{"x":1}`}, {Name: "ls"}}},
				{Role: "tool", ToolCallID: "call_1", Name: "calc", Text: `{"error":"no x"}`, IsError: true},
				{Role: "tool", Name: "ls", Text: "a.go"},
				{Role: "tool", Name: "ls", Text: `{"files":["a.go"],"n":1}`},
			}, Tools: []string{"calc", "ls"},
				Reply: &Message{Role: "assistant", Text: "ok", Reasoning: "retry", ToolCalls: []ToolCall{{ID: "call_2", Name: "calc", Arguments: "{}"}}}}, ""},
		{"a response that does not parse: the request still read", api.ShapeChatCompletions, `{"messages":[{"role":"user","content":"q"}]}`, `{"choices":"x"}`,
			Call{Messages: []Message{{Role: "user", Text: "q"}}}, "response: json: cannot unmarshal"},
		{"a request that does not parse: the reply still read", api.ShapeMessages, `{"messages":`, `{"content":[{"type":"text","text":"ok"}]}`,
			Call{Reply: &Message{Role: "assistant", Text: "ok"}}, "request: unexpected end of JSON input"},
		{"an unknown shape", "soap", `{}`, `{}`, Call{}, "unknown API shape soap"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCall(tc.shape, []byte(tc.req), []byte(tc.resp))
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one with %q", err, tc.err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				gb, _ := json.MarshalIndent(got, "", " ")
				wb, _ := json.MarshalIndent(tc.want, "", " ")
				t.Errorf("got\n%s\nwant\n%s", gb, wb)
			}
		})
	}
}

// TestParseCallFixtures reads the second turn of each captured CLI call
// (proxy/testdata): every part of it is read, and each tool result
// answers a tool call of an earlier assistant turn.
func TestParseCallFixtures(t *testing.T) {
	calls := cliCalls(t, "*-turn2.json")
	if len(calls) < 5 {
		t.Fatalf("%d fixtures", len(calls))
	}
	shapes := []struct{ route, shape, resp string }{
		{"/chat/completions", api.ShapeChatCompletions, `{"choices":[{"message":{"role":"assistant","content":"5"}}]}`},
		{"/responses", api.ShapeResponses, `{"output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"5"}]}]}`},
		{"/messages", api.ShapeMessages, `{"content":[{"type":"text","text":"5"}]}`},
		{"Content", api.ShapeGenerateContent, `{"candidates":[{"content":{"role":"model","parts":[{"text":"5"}]}}]}`},
	}
	for _, cc := range calls {
		t.Run(cc.name, func(t *testing.T) {
			shape, resp := "", ""
			for _, s := range shapes {
				if strings.HasSuffix(cc.path, s.route) {
					shape, resp = s.shape, s.resp
				}
			}
			if shape == "" {
				t.Fatalf("no shape for %s", cc.path)
			}
			c, err := ParseCall(shape, cc.body, []byte(resp))
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Tools) == 0 || c.Reply == nil || c.Reply.Text != "5" {
				t.Errorf("tools %v reply %+v", c.Tools, c.Reply)
			}
			made := map[string]bool{}
			results := 0
			for i, m := range c.Messages {
				switch m.Role {
				case "system", "developer", "user":
				case "assistant":
					for _, tc := range m.ToolCalls {
						if tc.Name == "" || !json.Valid([]byte(tc.Arguments)) {
							t.Errorf("message %d: tool call %+v", i, tc)
						}
						made[tc.ID+"/"+tc.Name] = true
						made[tc.ID] = tc.ID != ""
					}
				case "tool":
					results++
					if !made[m.ToolCallID] && !made["/"+m.Name] {
						t.Errorf("message %d: a result of no earlier tool call: %+v", i, m)
					}
					if m.IsError || m.Text == "" {
						t.Errorf("message %d: result %+v (the captured tools succeeded)", i, m)
					}
				default:
					t.Errorf("message %d: role %q", i, m.Role)
				}
			}
			if results == 0 {
				t.Errorf("no tool result in %d messages", len(c.Messages))
			}
		})
	}
}
