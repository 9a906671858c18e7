package proxy

import (
	"encoding/json"
	"strconv"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/internal/fastjson"
	"github.com/aglrl/agl/llmapi"
)

// OpenAI Responses ⇄ chat.Conversation. The gateway keeps no server-side
// response state: previous_response_id is unsupported (send the full input,
// as harnesses with store=false do).

// nsSep joins a namespace and a function name into the one name the
// model sees: Codex's multi_agent_v1 + spawn_agent is
// multi_agent_v1__spawn_agent in the prompt, and a call to that name goes
// back as a function_call named spawn_agent with namespace multi_agent_v1.
const nsSep = "__"

func decodeResponses(p *Proxy, c *call) *apiError {
	var req llmapi.ResponsesRequest
	if e := decodeJSON(c.body, &req); e != nil {
		return e
	}
	switch {
	case req.PreviousResponseID != nil && *req.PreviousResponseID != "":
		return unsupported("previous_response_id", "previous_response_id is not supported: the gateway stores no responses; send the whole conversation as input")
	case len(req.Conversation) > 0 && string(req.Conversation) != "null":
		return unsupported("conversation", "conversation objects are not supported; send the whole conversation as input")
	case req.Background:
		return unsupported("background", "background responses are not supported")
	case req.Text != nil && req.Text.Format != nil && req.Text.Format.Type != "" && req.Text.Format.Type != "text":
		return unsupported("text.format", "text format %q is not supported", req.Text.Format.Type)
	}
	var conv chat.Conversation
	var ignored []string
	ignoreSet(&ignored, "reasoning", req.Reasoning)
	ignoreSet(&ignored, "include", req.Include)
	ignoreSet(&ignored, "service_tier", req.ServiceTier)
	ignoreSet(&ignored, "prompt_cache_key", req.PromptCacheKey)
	ignoreSet(&ignored, "truncation", req.Truncation)
	if req.Instructions != nil && *req.Instructions != "" {
		conv.Messages = append(conv.Messages, chat.Message{Role: chat.RoleSystem, Content: *req.Instructions})
	}
	if len(req.Input) == 0 || string(req.Input) == "null" {
		return badRequest("input", "input is required")
	}
	if req.Input[0] == '"' {
		var s string
		if err := json.Unmarshal(req.Input, &s); err != nil {
			return badRequest("input", "invalid input: %v", err)
		}
		conv.Messages = append(conv.Messages, chat.Message{Role: chat.RoleUser, Content: s})
	} else {
		var items []llmapi.ResponsesItem
		if err := json.Unmarshal(req.Input, &items); err != nil {
			return badRequest("input", "input must be a string or an array of input items: %v", err)
		}
		var cur *chat.Message // assistant turn being assembled
		flush := func() {
			if cur != nil {
				conv.Messages = append(conv.Messages, *cur)
				cur = nil
			}
		}
		for i, it := range items {
			param := "input[" + strconv.Itoa(i) + "]"
			switch it.Type {
			case "", "message":
				text, e := textOf(it.Content, param+".content")
				if e != nil {
					return e
				}
				switch it.Role {
				case chat.RoleAssistant:
					if cur != nil && (len(cur.ToolCalls) > 0 || cur.Content != "") {
						flush()
					}
					if cur == nil {
						cur = &chat.Message{Role: chat.RoleAssistant}
					}
					cur.Content = text
				case chat.RoleUser, chat.RoleSystem, "developer":
					flush()
					role := it.Role
					if role == "developer" {
						role = chat.RoleSystem
					}
					conv.Messages = append(conv.Messages, chat.Message{Role: role, Content: text})
				default:
					return badRequest(param+".role", "invalid role %q: expected user, system, developer or assistant", it.Role)
				}
			case "function_call":
				if cur == nil {
					cur = &chat.Message{Role: chat.RoleAssistant}
				}
				name := it.Name
				if it.Namespace != "" {
					name = it.Namespace + nsSep + it.Name
				}
				cur.ToolCalls = append(cur.ToolCalls, chat.ToolCall{ID: it.CallID, Name: name, Arguments: it.Arguments})
			case "reasoning":
				if cur != nil && (len(cur.ToolCalls) > 0 || cur.Content != "") {
					flush()
				}
				if cur == nil {
					cur = &chat.Message{Role: chat.RoleAssistant}
				}
				for _, s := range it.Summary {
					cur.Reasoning += s.Text
				}
			case "custom_tool_call":
				if cur == nil {
					cur = &chat.Message{Role: chat.RoleAssistant}
				}
				cur.ToolCalls = append(cur.ToolCalls, chat.ToolCall{ID: it.CallID, Name: it.Name, Arguments: customArgs(it.Input)})
			case "function_call_output", "custom_tool_call_output":
				flush()
				out, e := textOf(it.Output, param+".output")
				if e != nil {
					return e
				}
				conv.Messages = append(conv.Messages, chat.Message{Role: chat.RoleTool, Content: out, ToolCallID: it.CallID})
			default:
				return unsupported(param+".type", "input item type %q is not supported", it.Type)
			}
		}
		flush()
	}
	var custom map[string]bool
	var namespaced map[string][2]string
	for i, t := range req.Tools {
		tp := "tools[" + strconv.Itoa(i) + "]"
		switch t.Type {
		case "function":
			conv.Tools = append(conv.Tools, chat.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
		case "namespace":
			// Flattened into its functions, each named namespace__function.
			if t.Name == "" {
				return badRequest(tp+".name", "namespace tool has no name")
			}
			for j, f := range t.Tools {
				if f.Type != "function" {
					ignored = append(ignored, tp+".tools["+strconv.Itoa(j)+"] ("+f.Type+")")
					continue
				}
				if namespaced == nil {
					namespaced = map[string][2]string{}
				}
				full := t.Name + nsSep + f.Name
				namespaced[full] = [2]string{t.Name, f.Name}
				conv.Tools = append(conv.Tools, chat.Tool{Name: full, Description: f.Description, Parameters: f.Parameters})
			}
		case "custom":
			// A freeform tool (Codex's apply_patch): to the model, a function
			// taking one string, "input".
			if custom == nil {
				custom = map[string]bool{}
			}
			custom[t.Name] = true
			conv.Tools = append(conv.Tools, chat.Tool{Name: t.Name, Description: t.Description, Parameters: json.RawMessage(customParams)})
		default:
			// A hosted tool (web_search, file_search, code_interpreter,
			// computer_use_preview, image_generation, mcp, local_shell, …)
			// runs on OpenAI's servers, which this is not: the model is
			// not told about it.
			ignored = append(ignored, tp+" ("+t.Type+")")
		}
	}
	c.ignored = ignored
	c.aux = &rsAux{custom: custom, namespaced: namespaced}
	drop, e := toolChoiceDropsTools(req.ToolChoice)
	if e != nil {
		return e
	}
	if drop {
		conv.Tools = nil
	}
	if e := checkConversation(&conv, "input"); e != nil {
		return e
	}
	var s engine.Sampling
	if req.Temperature != nil {
		s.Temperature = *req.Temperature
	}
	if req.TopP != nil {
		s.TopP = *req.TopP
	}
	if req.MaxOutputTokens != nil {
		s.MaxTokens = *req.MaxOutputTokens
	}
	model := req.Model
	if e := p.applyOverrides(c, &model, &s, req.Temperature != nil); e != nil {
		return e
	}
	c.stream = req.Stream
	c.chat = &ChatRequest{Model: model, Conv: conv, Sampling: s, ToolIDPrefix: "call_"}
	return nil
}

type rsAux struct {
	// custom names the request's freeform (custom) tools.
	custom map[string]bool
	// namespaced maps a namespace function's prompt name to its namespace
	// and function name.
	namespaced map[string][2]string
	items      []llmapi.ResponsesOutItem
}

// customParams is the schema a freeform tool gets in the prompt.
const customParams = `{"type":"object","properties":{"input":{"type":"string"}},"required":["input"]}`

// customArgs wraps a freeform tool's input as function arguments.
func customArgs(input string) string {
	return string(fastjson.AppendString([]byte(`{"input":`), input)) + "}"
}

// customInput unwraps a freeform tool call's input from its arguments.
func customInput(args string) string {
	var a struct {
		Input *string `json:"input"`
	}
	if json.Unmarshal([]byte(args), &a) == nil && a.Input != nil {
		return *a.Input
	}
	return args
}

func rsOutput(p *Proxy, c *call) []llmapi.ResponsesOutItem {
	r := c.res
	var out []llmapi.ResponsesOutItem
	if r.Message.Reasoning != "" {
		out = append(out, llmapi.ResponsesOutItem{Type: "reasoning", ID: "rs_" + c.id[len("resp_"):], Summary: []llmapi.ResponsesSummary{{Type: "summary_text", Text: r.Message.Reasoning}}})
	}
	if r.Message.Content != "" || len(r.Message.ToolCalls) == 0 {
		status := "completed"
		if r.FinishReason == engine.FinishLength {
			status = "incomplete" // as OpenAI marks a message cut at max_output_tokens
		}
		out = append(out, llmapi.ResponsesOutItem{Type: "message", ID: "msg_" + c.id[len("resp_"):], Status: status, Role: chat.RoleAssistant,
			Content: []llmapi.ResponsesPart{{Type: "output_text", Text: r.Message.Content, Annotations: []any{}, Logprobs: []any{}}}})
	}
	aux := c.aux.(*rsAux)
	custom := aux.custom
	for i, tc := range r.Message.ToolCalls {
		if custom[tc.Name] {
			in := customInput(tc.Arguments)
			out = append(out, llmapi.ResponsesOutItem{Type: "custom_tool_call", ID: "ctc_" + c.id[len("resp_"):] + "_" + strconv.Itoa(i), Status: "completed", CallID: tc.ID, Name: tc.Name, Input: &in})
			continue
		}
		args := tc.Arguments
		it := llmapi.ResponsesOutItem{Type: "function_call", ID: "fc_" + c.id[len("resp_"):] + "_" + strconv.Itoa(i), Status: "completed", CallID: tc.ID, Name: tc.Name, Arguments: &args}
		if ns, ok := aux.namespaced[tc.Name]; ok {
			it.Namespace, it.Name = ns[0], ns[1]
		}
		out = append(out, it)
	}
	return out
}

func (c *call) rsResponse(status string, output []llmapi.ResponsesOutItem) *llmapi.ResponsesResponse {
	r := c.res
	resp := &llmapi.ResponsesResponse{ID: c.id, Object: "response", CreatedAt: c.created, Status: status, Model: r.Model,
		Output: output, ParallelToolCalls: true, ToolChoice: "auto", Tools: []any{},
		Temperature: c.chat.Sampling.Temperature, TopP: c.chat.Sampling.TopP}
	if resp.TopP == 0 {
		resp.TopP = 1
	}
	if status != "in_progress" {
		resp.Usage = &llmapi.ResponsesUsage{InputTokens: r.PromptTokens, OutputTokens: r.CompletionTokens, TotalTokens: r.PromptTokens + r.CompletionTokens}
		if r.FinishReason == engine.FinishLength {
			resp.Status = "incomplete"
			resp.IncompleteDetails = &struct {
				Reason string `json:"reason"`
			}{"max_output_tokens"}
		}
	}
	return resp
}

func encodeResponses(p *Proxy, c *call) ([]byte, error) {
	items := rsOutput(p, c)
	c.aux.(*rsAux).items = items
	return json.Marshal(c.rsResponse("completed", items))
}

func streamResponses(p *Proxy, c *call, buf []byte) []byte {
	items := c.aux.(*rsAux).items
	seq := 0
	ev := func(name string, fields map[string]any) {
		fields["type"] = name
		fields["sequence_number"] = seq
		seq++
		buf = appendSSEEvent(buf, name, mustJSON(fields))
	}
	ev("response.created", map[string]any{"response": c.rsResponse("in_progress", []llmapi.ResponsesOutItem{})})
	ev("response.in_progress", map[string]any{"response": c.rsResponse("in_progress", []llmapi.ResponsesOutItem{})})
	for oi, it := range items {
		switch it.Type {
		case "reasoning":
			ev("response.output_item.added", map[string]any{"output_index": oi, "item": llmapi.ResponsesOutItem{Type: "reasoning", ID: it.ID}})
		case "message":
			ev("response.output_item.added", map[string]any{"output_index": oi, "item": llmapi.ResponsesOutItem{Type: "message", ID: it.ID, Status: "in_progress", Role: chat.RoleAssistant}})
			part := llmapi.ResponsesPart{Type: "output_text", Annotations: []any{}, Logprobs: []any{}}
			ev("response.content_part.added", map[string]any{"item_id": it.ID, "output_index": oi, "content_index": 0, "part": part})
			text := it.Content[0].Text
			ev("response.output_text.delta", map[string]any{"item_id": it.ID, "output_index": oi, "content_index": 0, "delta": text, "logprobs": []any{}})
			ev("response.output_text.done", map[string]any{"item_id": it.ID, "output_index": oi, "content_index": 0, "text": text, "logprobs": []any{}})
			part.Text = text
			ev("response.content_part.done", map[string]any{"item_id": it.ID, "output_index": oi, "content_index": 0, "part": part})
		case "function_call":
			empty := ""
			ev("response.output_item.added", map[string]any{"output_index": oi, "item": llmapi.ResponsesOutItem{Type: "function_call", ID: it.ID, Status: "in_progress", CallID: it.CallID, Name: it.Name, Namespace: it.Namespace, Arguments: &empty}})
			ev("response.function_call_arguments.delta", map[string]any{"item_id": it.ID, "output_index": oi, "delta": *it.Arguments})
			ev("response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": oi, "name": it.Name, "arguments": *it.Arguments})
		case "custom_tool_call":
			empty := ""
			ev("response.output_item.added", map[string]any{"output_index": oi, "item": llmapi.ResponsesOutItem{Type: "custom_tool_call", ID: it.ID, Status: "in_progress", CallID: it.CallID, Name: it.Name, Input: &empty}})
			ev("response.custom_tool_call_input.delta", map[string]any{"item_id": it.ID, "output_index": oi, "delta": *it.Input})
			ev("response.custom_tool_call_input.done", map[string]any{"item_id": it.ID, "output_index": oi, "input": *it.Input})
		}
		ev("response.output_item.done", map[string]any{"output_index": oi, "item": it})
	}
	final := c.rsResponse("completed", items)
	name := "response.completed"
	if final.Status == "incomplete" {
		name = "response.incomplete"
	}
	ev(name, map[string]any{"response": final})
	return buf
}
