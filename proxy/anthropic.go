package proxy

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/llmapi"
)

// Anthropic Messages ⇄ chat.Conversation.

// amIgnoredHeaders are request headers whose value is listed in the
// event's ignored field (beta features the gateway does not implement).
var amIgnoredHeaders = [...]string{"anthropic-beta"}

// ignoreSet appends name to *ignored when raw is a set JSON value.
func ignoreSet(ignored *[]string, name string, raw json.RawMessage) {
	if llmapi.IsSet(raw) {
		*ignored = append(*ignored, name)
	}
}

// amToolResult is the text of a tool_result's content: a string, or text
// and tool_reference blocks. A tool_reference (a tool search's result)
// names a deferred tool, which from then on is declared to the model (in
// the prompt's tool list, as this template declares tools) and appears in
// the result as "tool_reference: NAME".
func amToolResult(raw json.RawMessage, param string, loaded *map[string]bool) (string, *apiError) {
	if len(raw) == 0 || raw[0] != '[' {
		return textOf(raw, param)
	}
	var bs []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ToolName string `json:"tool_name"`
	}
	if err := json.Unmarshal(raw, &bs); err != nil {
		return "", badRequest(param, "%s: invalid content blocks: %v", param, err)
	}
	var sb strings.Builder
	for j, b := range bs {
		if j > 0 {
			sb.WriteByte('\n')
		}
		switch b.Type {
		case "text":
			sb.WriteString(b.Text)
		case "tool_reference":
			if b.ToolName == "" {
				return "", badRequest(param+"."+strconv.Itoa(j)+".tool_name", "%s.%d.tool_name: Field required", param, j)
			}
			if *loaded == nil {
				*loaded = map[string]bool{}
			}
			(*loaded)[b.ToolName] = true
			sb.WriteString("tool_reference: " + b.ToolName)
		default:
			return "", unsupported(param+"."+strconv.Itoa(j)+".type", "tool_result content block type %q is not supported (text and tool_reference only)", b.Type)
		}
	}
	return sb.String(), nil
}

// amText joins the text of a system prompt or system message (a string or
// text blocks), listing blocks' cache_control as ignored.
func amText(raw json.RawMessage, param string, ignored *[]string) (string, *apiError) {
	if len(raw) > 0 && raw[0] == '[' {
		var bs []llmapi.AnthropicBlock
		if err := json.Unmarshal(raw, &bs); err != nil {
			return "", badRequest(param, "%s: Input should be a valid list of text blocks: %v", param, err)
		}
		var sb strings.Builder
		for j, b := range bs {
			bp := param + "." + strconv.Itoa(j)
			if b.Type != "text" {
				return "", badRequest(bp+".type", "%s.type: Input tag '%s' found using 'type' does not match the expected tag 'text'", bp, b.Type)
			}
			ignoreSet(ignored, bp+".cache_control", b.CacheControl)
			if j > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(b.Text)
		}
		return sb.String(), nil
	}
	return textOf(raw, param)
}

// amBlocks parses content that is a string or an array of blocks.
func amBlocks(raw json.RawMessage, param string) ([]llmapi.AnthropicBlock, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest(param, "content is required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badRequest(param, "invalid content: %v", err)
		}
		return []llmapi.AnthropicBlock{{Type: "text", Text: s}}, nil
	}
	var bs []llmapi.AnthropicBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, badRequest(param, "content must be a string or an array of content blocks: %v", err)
	}
	return bs, nil
}

func decodeMessages(p *Proxy, c *call) *apiError {
	var req llmapi.AnthropicRequest
	if e := decodeJSON(c.body, &req); e != nil {
		return e
	}
	if req.MaxTokens == nil {
		if !c.countOnly {
			return badRequest("max_tokens", "max_tokens: Field required")
		}
		req.MaxTokens = new(int)
	}
	if llmapi.IsSet(req.MCPServers) {
		return unsupported("mcp_servers", "mcp_servers: MCP connectors are not supported")
	}
	if llmapi.IsSet(req.Container) {
		return unsupported("container", "container: server-side containers are not supported")
	}
	var conv chat.Conversation
	var ignored []string
	// loaded names the deferred tools a tool search result referenced.
	var loaded map[string]bool
	ignoreSet(&ignored, "thinking", req.Thinking)
	ignoreSet(&ignored, "context_management", req.ContextManagement)
	ignoreSet(&ignored, "output_config", req.OutputConfig)
	ignoreSet(&ignored, "service_tier", req.ServiceTier)
	if c.header != nil {
		for _, h := range amIgnoredHeaders {
			if v := c.header.Get(h); v != "" {
				ignored = append(ignored, "header "+h+": "+v)
			}
		}
	}
	if len(req.System) > 0 && string(req.System) != "null" {
		sys, e := amText(req.System, "system", &ignored)
		if e != nil {
			return e
		}
		conv.Messages = append(conv.Messages, chat.Message{Role: chat.RoleSystem, Content: sys})
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		param := "messages." + strconv.Itoa(i)
		ignoreSet(&ignored, param+".output_config", m.OutputConfig)
		blocks, e := amBlocks(m.Content, param+".content")
		if e != nil {
			return e
		}
		if m.Role == chat.RoleSystem {
			// A system message inside the conversation (Claude Code's
			// mid-conversation reminders): kept in place, rendered as a
			// system turn.
			sys, e := amText(m.Content, param+".content", &ignored)
			if e != nil {
				return e
			}
			conv.Messages = append(conv.Messages, chat.Message{Role: chat.RoleSystem, Content: sys})
			continue
		}
		switch m.Role {
		case chat.RoleUser:
			var text []string
			flush := func() {
				if len(text) > 0 {
					conv.Messages = append(conv.Messages, chat.Message{Role: chat.RoleUser, Content: strings.Join(text, "\n")})
					text = text[:0]
				}
			}
			for j, b := range blocks {
				bp := param + ".content." + strconv.Itoa(j)
				ignoreSet(&ignored, bp+".cache_control", b.CacheControl)
				switch b.Type {
				case "text":
					text = append(text, b.Text)
				case "tool_result":
					flush()
					out, e := amToolResult(b.Content, bp+".content", &loaded)
					if e != nil {
						return e
					}
					if b.ToolUseID == "" {
						return badRequest(bp+".tool_use_id", "tool_result needs tool_use_id")
					}
					if b.IsError {
						// The template has no error mark: the model sees the text.
						ignored = append(ignored, bp+".is_error")
					}
					conv.Messages = append(conv.Messages, chat.Message{Role: chat.RoleTool, Content: out, ToolCallID: b.ToolUseID})
				default:
					return unsupported(bp+".type", "content block type %q is not supported in user messages (text and tool_result only)", b.Type)
				}
			}
			flush()
		case chat.RoleAssistant:
			msg := chat.Message{Role: chat.RoleAssistant}
			var text []string
			for j, b := range blocks {
				bp := param + ".content." + strconv.Itoa(j)
				ignoreSet(&ignored, bp+".cache_control", b.CacheControl)
				switch b.Type {
				case "text":
					text = append(text, b.Text)
				case "thinking":
					msg.Reasoning += b.Thinking
				case "redacted_thinking":
					// Encrypted thinking of another model: nothing to render.
					ignored = append(ignored, bp+" (redacted_thinking)")
				case "tool_use":
					if b.ID == "" || b.Name == "" {
						return badRequest(bp, "tool_use needs id and name")
					}
					msg.ToolCalls = append(msg.ToolCalls, chat.ToolCall{ID: b.ID, Name: b.Name, Arguments: llmapi.CompactJSON(b.Input)})
				default:
					return unsupported(bp+".type", "content block type %q is not supported in assistant messages", b.Type)
				}
			}
			msg.Content = strings.Join(text, "\n")
			conv.Messages = append(conv.Messages, msg)
		default:
			// Anthropic's own wording, which clients' fallbacks match.
			return badRequest(param+".role", "%s.role: Input should be 'user' or 'assistant'", param)
		}
	}
	for i, t := range req.Tools {
		tp := "tools." + strconv.Itoa(i)
		if t.Type != "" && t.Type != "custom" {
			return unsupported(tp+".type", "server tool type %q is not supported (custom tools only)", t.Type)
		}
		ignoreSet(&ignored, tp+".cache_control", t.CacheControl)
		if t.DeferLoading && !loaded[t.Name] {
			ignored = append(ignored, tp+" ("+t.Name+", defer_loading: left out of the prompt)")
			continue
		}
		conv.Tools = append(conv.Tools, chat.Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	if len(req.ToolChoice) > 0 && string(req.ToolChoice) != "null" {
		var tc struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(req.ToolChoice, &tc); err != nil {
			return badRequest("tool_choice", "invalid tool_choice: %v", err)
		}
		switch tc.Type {
		case "auto":
		case "none":
			conv.Tools = nil
		default:
			return unsupported("tool_choice", "tool_choice type %q is not supported (auto and none only)", tc.Type)
		}
	}
	if e := checkConversation(&conv, "messages"); e != nil {
		return e
	}
	if last := conv.Messages[len(conv.Messages)-1]; last.Role == chat.RoleAssistant && !c.countOnly {
		return unsupported("messages."+strconv.Itoa(len(req.Messages)-1), "a final assistant message (prefill) is not supported: end with a user message")
	}
	var s engine.Sampling
	s.MaxTokens = *req.MaxTokens
	if req.Temperature != nil {
		s.Temperature = *req.Temperature
	}
	if req.TopP != nil {
		s.TopP = *req.TopP
	}
	if req.TopK != nil {
		s.TopK = *req.TopK
	}
	model := req.Model
	if e := p.applyOverrides(c, &model, &s, req.Temperature != nil); e != nil {
		return e
	}
	c.stream = req.Stream
	c.ignored = ignored
	c.chat = &ChatRequest{Model: model, Conv: conv, Sampling: s, Stop: req.StopSequences, ToolIDPrefix: "toolu_"}
	return nil
}

func amStopReason(r *Result) string {
	switch {
	case r.FinishReason == engine.FinishLength:
		return "max_tokens"
	case len(r.Message.ToolCalls) > 0:
		return "tool_use"
	}
	return "end_turn"
}

func amContent(r *Result) []llmapi.AnthropicOutBlock {
	var out []llmapi.AnthropicOutBlock
	empty := ""
	if r.Message.Reasoning != "" {
		th := r.Message.Reasoning
		out = append(out, llmapi.AnthropicOutBlock{Type: "thinking", Thinking: &th, Signature: &empty})
	}
	if r.Message.Content != "" || len(r.Message.ToolCalls) == 0 {
		t := r.Message.Content
		out = append(out, llmapi.AnthropicOutBlock{Type: "text", Text: &t})
	}
	for _, tc := range r.Message.ToolCalls {
		out = append(out, llmapi.AnthropicOutBlock{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: jsonObject(tc.Arguments)})
	}
	return out
}

func encodeMessages(p *Proxy, c *call) ([]byte, error) {
	r := c.res
	stop := amStopReason(r)
	resp := llmapi.AnthropicResponse{ID: c.id, Type: "message", Role: chat.RoleAssistant, Model: r.Model, Content: amContent(r),
		StopReason: &stop, Usage: llmapi.AnthropicUsage{InputTokens: r.PromptTokens, OutputTokens: r.CompletionTokens}}
	return json.Marshal(&resp)
}

func streamMessages(p *Proxy, c *call, buf []byte) []byte {
	r := c.res
	start := llmapi.AnthropicResponse{ID: c.id, Type: "message", Role: chat.RoleAssistant, Model: r.Model, Content: []llmapi.AnthropicOutBlock{},
		Usage: llmapi.AnthropicUsage{InputTokens: r.PromptTokens}}
	buf = appendSSEEvent(buf, "message_start", mustJSON(struct {
		Type    string                    `json:"type"`
		Message *llmapi.AnthropicResponse `json:"message"`
	}{"message_start", &start}))
	type delta struct {
		Type        string  `json:"type"`
		Text        *string `json:"text,omitempty"`
		Thinking    *string `json:"thinking,omitempty"`
		PartialJSON *string `json:"partial_json,omitempty"`
		Signature   *string `json:"signature,omitempty"`
	}
	type blockEvent struct {
		Type         string                    `json:"type"`
		Index        int                       `json:"index"`
		ContentBlock *llmapi.AnthropicOutBlock `json:"content_block,omitempty"`
		Delta        *delta                    `json:"delta,omitempty"`
	}
	empty := ""
	for i, b := range amContent(r) {
		var head llmapi.AnthropicOutBlock
		var d delta
		switch b.Type {
		case "thinking":
			head = llmapi.AnthropicOutBlock{Type: "thinking", Thinking: &empty, Signature: &empty}
			d = delta{Type: "thinking_delta", Thinking: b.Thinking}
		case "text":
			head = llmapi.AnthropicOutBlock{Type: "text", Text: &empty}
			d = delta{Type: "text_delta", Text: b.Text}
		case "tool_use":
			head = llmapi.AnthropicOutBlock{Type: "tool_use", ID: b.ID, Name: b.Name, Input: json.RawMessage("{}")}
			s := string(b.Input)
			d = delta{Type: "input_json_delta", PartialJSON: &s}
		}
		buf = appendSSEEvent(buf, "content_block_start", mustJSON(&blockEvent{Type: "content_block_start", Index: i, ContentBlock: &head}))
		buf = appendSSEEvent(buf, "content_block_delta", mustJSON(&blockEvent{Type: "content_block_delta", Index: i, Delta: &d}))
		if b.Type == "thinking" {
			buf = appendSSEEvent(buf, "content_block_delta", mustJSON(&blockEvent{Type: "content_block_delta", Index: i, Delta: &delta{Type: "signature_delta", Signature: &empty}}))
		}
		buf = appendSSEEvent(buf, "content_block_stop", mustJSON(&blockEvent{Type: "content_block_stop", Index: i}))
	}
	stop := amStopReason(r)
	buf = appendSSEEvent(buf, "message_delta", mustJSON(struct {
		Type  string `json:"type"`
		Delta struct {
			StopReason   string  `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		} `json:"delta"`
		Usage llmapi.AnthropicUsage `json:"usage"`
	}{Type: "message_delta", Delta: struct {
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}{StopReason: stop}, Usage: llmapi.AnthropicUsage{InputTokens: r.PromptTokens, OutputTokens: r.CompletionTokens}}))
	return appendSSEEvent(buf, "message_stop", []byte(`{"type":"message_stop"}`))
}
