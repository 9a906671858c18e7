package proxy_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// nsTools is a Responses tool list as Codex sends it: a function, a
// namespace of functions, and hosted tools.
const nsTools = `[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}},` +
	`{"type":"namespace","name":"multi_agent_v1","description":"Sub-agents.","tools":[{"type":"function","name":"spawn_agent","description":"Spawn one.","parameters":{"type":"object","properties":{"message":{"type":"string"}}}}]},` +
	`{"type":"web_search","external_web_access":true}]`

// TestResponsesNamespaceCall: a call to a namespace's function goes back as
// a function_call item named as the function, with its namespace (what
// Codex routes by), streamed or not; Codex sending that item back
// continues the token state.
func TestResponsesNamespaceCall(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "stream"}[stream], func(t *testing.T) {
			e := newEnv(t, proxy.Config{}, nil)
			cl := e.claim(t, store.ModeTrain)
			e.eng.Push(toolCall("multi_agent_v1__spawn_agent", `{"message":"hi"}`), text("done"))
			url := base(e.srv, cl) + "/v1/responses"
			input := `[{"type":"message","role":"user","content":[{"type":"input_text","text":"spawn"}]}]`
			req := `{"model":"m","stream":` + mustJSON(t, stream) + `,"tools":` + nsTools + `,"input":` + input + `}`
			st, _, body := post(t, "POST", url, bearer(cl.Key), req)
			if st != 200 {
				t.Fatalf("status %d: %s", st, body)
			}
			var item map[string]any
			if stream {
				// The item as response.output_item.added and .done carry it.
				for _, ev := range strings.Split(body, "\n\n") {
					_, data, ok := strings.Cut(ev, "data: ")
					if !ok {
						continue
					}
					var m struct {
						Type string         `json:"type"`
						Item map[string]any `json:"item"`
					}
					if err := json.Unmarshal([]byte(data), &m); err != nil {
						t.Fatalf("%v: %s", err, data)
					}
					if strings.HasPrefix(m.Type, "response.output_item.") && m.Item["type"] == "function_call" {
						if m.Item["namespace"] != "multi_agent_v1" || m.Item["name"] != "spawn_agent" {
							t.Errorf("%s item: %v", m.Type, m.Item)
						}
						item = m.Item
					}
				}
			} else {
				var r struct {
					Output []map[string]any `json:"output"`
				}
				if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Output) != 1 {
					t.Fatalf("%v: %s", err, body)
				}
				item = r.Output[0]
			}
			if item == nil || item["type"] != "function_call" || item["name"] != "spawn_agent" || item["namespace"] != "multi_agent_v1" || item["arguments"] != `{"message":"hi"}` {
				t.Fatalf("function_call item %v, want name spawn_agent, namespace multi_agent_v1", item)
			}
			// The next turn, as Codex sends it: the call item back with its
			// namespace, then the output.
			back := mustJSON(t, map[string]any{"type": "function_call", "name": "spawn_agent", "namespace": "multi_agent_v1", "arguments": item["arguments"], "call_id": item["call_id"]})
			out := mustJSON(t, map[string]any{"type": "function_call_output", "call_id": item["call_id"], "output": "agent 7"})
			req = `{"model":"m","stream":` + mustJSON(t, stream) + `,"tools":` + nsTools + `,"input":` + strings.TrimSuffix(input, "]") + "," + back + "," + out + `]}`
			if st, _, body := post(t, "POST", url, bearer(cl.Key), req); st != 200 {
				t.Fatalf("second call: status %d: %s", st, body)
			}
			calls := e.calls(t, cl)
			e.checkChain(t, calls, api.ShapeResponses)
			if !slices.Contains(calls[0].Ignored, "tools[2] (web_search)") {
				t.Errorf("ignored %q, want the web_search tool listed", calls[0].Ignored)
			}
		})
	}
}

// TestResponsesHostedTools: every hosted tool type is left out of the
// prompt and listed in the event, not refused.
func TestResponsesHostedTools(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	for _, typ := range []string{"web_search", "web_search_preview", "file_search", "code_interpreter", "computer_use_preview", "image_generation", "mcp", "local_shell"} {
		t.Run(typ, func(t *testing.T) {
			cl := e.claim(t, store.ModeTrain)
			e.eng.Push(text("ok"))
			req := `{"model":"m","input":"hi","tools":[{"type":"function","name":"f","parameters":{"type":"object"}},{"type":"` + typ + `","server_label":"x"}]}`
			if st, _, body := post(t, "POST", base(e.srv, cl)+"/v1/responses", bearer(cl.Key), req); st != 200 {
				t.Fatalf("status %d: %s", st, body)
			}
			c := e.calls(t, cl)[0]
			if want := "tools[1] (" + typ + ")"; !slices.Contains(c.Ignored, want) {
				t.Errorf("ignored %q, want %q", c.Ignored, want)
			}
			if p := e.tmpl.Tokenizer().Decode(c.PromptIDs); strings.Contains(p, typ) || !strings.Contains(p, "# Tools\nf(") {
				t.Errorf("prompt should declare f and not %s: %q", typ, p)
			}
		})
	}
}

// TestResponsesIncomplete: a reply cut at max_output_tokens marks its
// message item and the response incomplete, as OpenAI does.
func TestResponsesIncomplete(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "stream"}[stream], func(t *testing.T) {
			e := newEnv(t, proxy.Config{}, nil)
			cl := e.claim(t, store.ModeTrain)
			e.eng.Push(text("a long answer that does not fit"))
			req := `{"model":"m","input":"hi","max_output_tokens":4,"stream":` + mustJSON(t, stream) + `}`
			st, _, body := post(t, "POST", base(e.srv, cl)+"/v1/responses", bearer(cl.Key), req)
			if st != 200 {
				t.Fatalf("status %d: %s", st, body)
			}
			final := body
			if stream {
				i := strings.Index(body, "event: response.incomplete\ndata: ")
				if i < 0 {
					t.Fatalf("no response.incomplete event: %s", body)
				}
				var ev struct {
					Response json.RawMessage `json:"response"`
				}
				line, _, _ := strings.Cut(body[i+len("event: response.incomplete\ndata: "):], "\n")
				if err := json.Unmarshal([]byte(line), &ev); err != nil {
					t.Fatal(err)
				}
				final = string(ev.Response)
			}
			var r struct {
				Status            string `json:"status"`
				IncompleteDetails *struct {
					Reason string `json:"reason"`
				} `json:"incomplete_details"`
				Output []struct {
					Type, Status string
				} `json:"output"`
			}
			if err := json.Unmarshal([]byte(final), &r); err != nil {
				t.Fatal(err)
			}
			if r.Status != "incomplete" || r.IncompleteDetails == nil || r.IncompleteDetails.Reason != "max_output_tokens" || len(r.Output) != 1 || r.Output[0].Type != "message" || r.Output[0].Status != "incomplete" {
				t.Errorf("want an incomplete response and message item: %s", final)
			}
		})
	}
}

// TestMessagesSystemInConversation: system messages inside messages (Claude
// Code's reminders, here after a tool result) render in place as system
// turns, and the next call still continues the token state; a role
// Anthropic refuses is refused in Anthropic's words.
func TestMessagesSystemInConversation(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	e.eng.Push(toolCall("f", `{}`), text("done"))
	url, hdr := base(e.srv, cl)+"/v1/messages?beta=true", map[string]string{"x-api-key": cl.Key, "anthropic-version": "2023-06-01", "anthropic-beta": "context-management-2025-06-27"}
	tools := `"tools":[{"name":"f","input_schema":{"type":"object"}}]`
	msgs := `{"role":"user","content":"go"},{"role":"system","content":[{"type":"text","text":"REMINDER ONE","cache_control":{"type":"ephemeral"}}]}`
	st, _, body := post(t, "POST", url, hdr, `{"model":"m","max_tokens":100,`+tools+`,"messages":[`+msgs+`]}`)
	if st != 200 {
		t.Fatalf("status %d: %s", st, body)
	}
	var r struct {
		Content []struct {
			Type, ID string
		} `json:"content"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Content) == 0 || r.Content[len(r.Content)-1].Type != "tool_use" {
		t.Fatalf("%v: %s", err, body)
	}
	id := r.Content[len(r.Content)-1].ID
	msgs += `,{"role":"assistant","content":[{"type":"tool_use","id":"` + id + `","name":"f","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","content":"r","is_error":true}]},{"role":"system","content":"REMINDER TWO"}`
	if st, _, body := post(t, "POST", url, hdr, `{"model":"m","max_tokens":100,`+tools+`,"messages":[`+msgs+`]}`); st != 200 {
		t.Fatalf("second call: status %d: %s", st, body)
	}
	calls := e.calls(t, cl)
	e.checkChain(t, calls, api.ShapeMessages)
	p := e.tmpl.Tokenizer().Decode(calls[1].PromptIDs)
	one, two := strings.Index(p, chat.TokIMStart+"system\nREMINDER ONE"+chat.TokIMEnd), strings.Index(p, chat.TokIMStart+"system\nREMINDER TWO"+chat.TokIMEnd)
	if one < 0 || two < 0 || !(strings.Index(p, "go") < one && one < strings.Index(p, "<tool_response>") && strings.Index(p, "<tool_response>") < two) {
		t.Errorf("system messages not in place as system turns: %q", p)
	}
	if !slices.Contains(calls[0].Ignored, "messages.1.content.0.cache_control") || !slices.Contains(calls[0].Ignored, "header anthropic-beta: context-management-2025-06-27") {
		t.Errorf("ignored %q", calls[0].Ignored)
	}
	if !slices.Contains(calls[1].Ignored, "messages.3.content.0.is_error") {
		t.Errorf("second call: ignored %q, want the tool result's is_error", calls[1].Ignored)
	}

	st, _, body = post(t, "POST", url, hdr, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"developer","content":"x"}]}`)
	var er struct {
		Error struct{ Type, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &er); err != nil || st != 400 || er.Error.Type != "invalid_request_error" || er.Error.Message != "messages.1.role: Input should be 'user' or 'assistant'" {
		t.Errorf("bad role: %d %s", st, body)
	}
}

// TestMessagesToolReference: a deferred tool (defer_loading) is left out
// of the prompt until a tool search result references it
// ({"type":"tool_reference","tool_name":…} in a tool_result, as Claude
// Code's ToolSearch returns); from then on the model is told about it.
func TestMessagesToolReference(t *testing.T) {
	e := newEnv(t, proxy.Config{}, nil)
	cl := e.claim(t, store.ModeTrain)
	e.eng.Push(toolCall("ToolSearch", `{"query":"select:Deferred"}`), text("done"))
	url, hdr := base(e.srv, cl)+"/v1/messages", map[string]string{"x-api-key": cl.Key, "anthropic-version": "2023-06-01"}
	tools := `"tools":[{"name":"ToolSearch","input_schema":{"type":"object"}},{"name":"Deferred","description":"DEFERRED TOOL","input_schema":{"type":"object"},"defer_loading":true}]`
	msgs := `{"role":"user","content":"go"}`
	st, _, body := post(t, "POST", url, hdr, `{"model":"m","max_tokens":100,`+tools+`,"messages":[`+msgs+`]}`)
	if st != 200 {
		t.Fatalf("status %d: %s", st, body)
	}
	var r struct {
		Content []struct{ Type, ID string } `json:"content"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Content) == 0 {
		t.Fatalf("%v: %s", err, body)
	}
	id := r.Content[len(r.Content)-1].ID
	msgs += `,{"role":"assistant","content":[{"type":"tool_use","id":"` + id + `","name":"ToolSearch","input":{"query":"select:Deferred"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","content":[{"type":"tool_reference","tool_name":"Deferred"}]}]}`
	if st, _, body := post(t, "POST", url, hdr, `{"model":"m","max_tokens":100,`+tools+`,"messages":[`+msgs+`]}`); st != 200 {
		t.Fatalf("second call: status %d: %s", st, body)
	}
	calls := e.calls(t, cl)
	if len(calls) != 2 {
		t.Fatalf("%d calls", len(calls))
	}
	p0, p1 := e.tmpl.Tokenizer().Decode(calls[0].PromptIDs), e.tmpl.Tokenizer().Decode(calls[1].PromptIDs)
	if strings.Contains(p0, "DEFERRED TOOL") || !slices.Contains(calls[0].Ignored, "tools.1 (Deferred, defer_loading: left out of the prompt)") {
		t.Errorf("first call: the deferred tool is declared or not listed as ignored (%q): %q", calls[0].Ignored, p0)
	}
	if !strings.Contains(p1, "DEFERRED TOOL") || !strings.Contains(p1, "tool_reference: Deferred") || slices.ContainsFunc(calls[1].Ignored, func(s string) bool { return strings.Contains(s, "Deferred") }) {
		t.Errorf("second call: the referenced tool is not declared (%q): %q", calls[1].Ignored, p1)
	}
	if calls[1].RenderReason != proxy.ReasonToolsChanged {
		t.Errorf("second call render reason %q, want %q", calls[1].RenderReason, proxy.ReasonToolsChanged)
	}
}
