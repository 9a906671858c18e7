package proxy

import (
	"encoding/json"
	"strconv"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/llmapi"
)

// OpenAI Chat Completions and Completions ⇄ chat.Conversation.

// chatUnsupported rejects Chat Completions parameters the gateway cannot
// honour (rather than silently ignoring them).
func chatUnsupported(r *llmapi.ChatRequest) *apiError {
	switch {
	case r.N != nil && *r.N != 1:
		return unsupported("n", "n=%d is not supported: ask for one choice per call", *r.N)
	case r.Functions != nil:
		return unsupported("functions", "the deprecated functions parameter is not supported; use tools")
	case r.ResponseFormat != nil && r.ResponseFormat.Type != "" && r.ResponseFormat.Type != "text":
		return unsupported("response_format", "response_format %q is not supported", r.ResponseFormat.Type)
	case r.Logprobs || (r.TopLogprobs != nil && *r.TopLogprobs > 0):
		return unsupported("logprobs", "logprobs are recorded by the gateway but not returned to harnesses")
	case len(r.LogitBias) > 0:
		return unsupported("logit_bias", "logit_bias is not supported")
	case r.PresencePenalty != nil && *r.PresencePenalty != 0:
		return unsupported("presence_penalty", "presence_penalty is not supported (it would change the sampling policy being trained)")
	case r.FrequencyPenalty != nil && *r.FrequencyPenalty != 0:
		return unsupported("frequency_penalty", "frequency_penalty is not supported (it would change the sampling policy being trained)")
	case len(r.Modalities) > 1 || (len(r.Modalities) == 1 && r.Modalities[0] != "text"):
		return unsupported("modalities", "only the text modality is supported")
	case llmapi.IsSet(r.Audio):
		return unsupported("audio", "audio output is not supported")
	case llmapi.IsSet(r.Prediction):
		return unsupported("prediction", "predicted outputs are not supported")
	case llmapi.IsSet(r.WebSearchOptions):
		return unsupported("web_search_options", "web search is not supported")
	}
	return nil
}

// stopStrings parses "stop": a string or an array of strings.
func stopStrings(raw json.RawMessage, param string) ([]string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badRequest(param, "invalid stop: %v", err)
		}
		return []string{s}, nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err != nil {
		return nil, badRequest(param, "stop must be a string or an array of strings")
	}
	return ss, nil
}

// toolChoiceDropsTools interprets an OpenAI tool_choice: "auto" (or absent)
// keeps tools, "none" drops them, anything forcing a call is unsupported.
func toolChoiceDropsTools(raw json.RawMessage) (bool, *apiError) {
	switch string(raw) {
	case "", "null", `"auto"`:
		return false, nil
	case `"none"`:
		return true, nil
	}
	var obj struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &obj) == nil && (obj.Type == "auto") {
		return false, nil
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Type == "none" {
		return true, nil
	}
	return false, unsupported("tool_choice", "tool_choice %s is not supported (only auto and none): the model cannot be forced to call a tool", string(raw))
}

func decodeChat(p *Proxy, c *call) *apiError {
	var req llmapi.ChatRequest
	if !llmapi.DecodeChatFast(c.body, &req) {
		req = llmapi.ChatRequest{}
		if e := decodeJSON(c.body, &req); e != nil {
			return e
		}
	}
	if e := chatUnsupported(&req); e != nil {
		return e
	}
	conv := chat.Conversation{Messages: make([]chat.Message, 0, len(req.Messages))}
	for i := range req.Messages {
		m := &req.Messages[i]
		param := "messages[" + strconv.Itoa(i) + "]"
		if m.FunctionCall != nil && string(m.FunctionCall) != "null" {
			return unsupported(param+".function_call", "function_call messages are not supported; use tool_calls")
		}
		if m.Audio != nil && string(m.Audio) != "null" {
			return unsupported(param+".audio", "audio is not supported")
		}
		text, isText := m.ContentString()
		if !isText {
			var e *apiError
			if text, e = textOf(m.Content, param+".content"); e != nil {
				return e
			}
		}
		msg := chat.Message{Role: m.Role, Content: text, Name: m.Name}
		switch m.Role {
		case "developer":
			msg.Role = chat.RoleSystem
		case chat.RoleSystem, chat.RoleUser:
		case chat.RoleAssistant:
			msg.Reasoning = m.ReasoningContent
			msg.Name = ""
			for j, tc := range m.ToolCalls {
				if tc.Type != "" && tc.Type != "function" {
					return unsupported(param+".tool_calls["+strconv.Itoa(j)+"].type", "tool call type %q is not supported", tc.Type)
				}
				msg.ToolCalls = append(msg.ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
		case chat.RoleTool:
			msg.ToolCallID = m.ToolCallID
		case "function":
			return unsupported(param+".role", "role function is not supported; use tool")
		default:
			return badRequest(param+".role", "invalid role %q: expected system, developer, user, assistant or tool", m.Role)
		}
		conv.Messages = append(conv.Messages, msg)
	}
	for i, t := range req.Tools {
		if t.Type != "function" {
			return unsupported("tools["+strconv.Itoa(i)+"].type", "tool type %q is not supported (function only)", t.Type)
		}
		conv.Tools = append(conv.Tools, chat.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	drop, e := toolChoiceDropsTools(req.ToolChoice)
	if e != nil {
		return e
	}
	if drop {
		conv.Tools = nil
	}
	if e := checkConversation(&conv, "messages"); e != nil {
		return e
	}
	stop, e := stopStrings(req.Stop, "stop")
	if e != nil {
		return e
	}
	var s engine.Sampling
	if req.Temperature != nil {
		s.Temperature = *req.Temperature
	}
	if req.TopP != nil {
		s.TopP = *req.TopP
	}
	if req.TopK != nil {
		s.TopK = *req.TopK
	}
	if req.MaxCompletionTokens != nil {
		s.MaxTokens = *req.MaxCompletionTokens
	} else if req.MaxTokens != nil {
		s.MaxTokens = *req.MaxTokens
	}
	if req.Seed != nil {
		s.Seed = uint64(*req.Seed)
	}
	model := req.Model
	if e := p.applyOverrides(c, &model, &s, req.Temperature != nil); e != nil {
		return e
	}
	c.stream = req.Stream
	c.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	c.chat = &ChatRequest{Model: model, Conv: conv, Sampling: s, Stop: stop, ToolIDPrefix: "call_"}
	return nil
}

func (c *call) usage() *llmapi.ChatUsage {
	r := c.res
	return &llmapi.ChatUsage{PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens, TotalTokens: r.PromptTokens + r.CompletionTokens}
}

// chatFinish maps a result to Chat Completions' finish_reason.
func chatFinish(r *Result) string {
	switch {
	case r.FinishReason == engine.FinishLength:
		return "length"
	case len(r.Message.ToolCalls) > 0:
		return "tool_calls"
	}
	return "stop"
}

func encodeChat(p *Proxy, c *call) ([]byte, error) {
	r := c.res
	msg := &llmapi.ChatReply{Role: chat.RoleAssistant, ReasoningContent: r.Message.Reasoning}
	if r.Message.Content != "" || len(r.Message.ToolCalls) == 0 {
		s := r.Message.Content
		msg.Content = &s
	}
	for _, tc := range r.Message.ToolCalls {
		var t llmapi.ChatToolCall
		t.ID, t.Type = tc.ID, "function"
		t.Function.Name, t.Function.Arguments = tc.Name, tc.Arguments
		msg.ToolCalls = append(msg.ToolCalls, t)
	}
	fin := chatFinish(r)
	resp := llmapi.ChatResponse{ID: c.id, Object: "chat.completion", Created: c.created, Model: r.Model,
		Choices: []llmapi.ChatChoice{{Message: msg, FinishReason: &fin}}, Usage: c.usage()}
	return json.Marshal(&resp)
}

func streamChat(p *Proxy, c *call, buf []byte) []byte {
	r := c.res
	chunk := llmapi.ChatResponse{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: r.Model}
	emit := func(d *llmapi.ChatDelta, fin *string) {
		chunk.Choices = []llmapi.ChatChoice{{Delta: d, FinishReason: fin}}
		buf = appendSSEChunk(buf, &chunk)
	}
	empty := ""
	emit(&llmapi.ChatDelta{Role: chat.RoleAssistant, Content: &empty}, nil)
	if r.Message.Reasoning != "" {
		emit(&llmapi.ChatDelta{ReasoningContent: r.Message.Reasoning}, nil)
	}
	if r.Message.Content != "" {
		s := r.Message.Content
		emit(&llmapi.ChatDelta{Content: &s}, nil)
	}
	for i, tc := range r.Message.ToolCalls {
		idx := i
		var head llmapi.ChatToolCall
		head.Index, head.ID, head.Type = &idx, tc.ID, "function"
		head.Function.Name = tc.Name
		emit(&llmapi.ChatDelta{ToolCalls: []llmapi.ChatToolCall{head}}, nil)
		var args llmapi.ChatToolCall
		args.Index = &idx
		args.Function.Arguments = tc.Arguments
		emit(&llmapi.ChatDelta{ToolCalls: []llmapi.ChatToolCall{args}}, nil)
	}
	fin := chatFinish(r)
	emit(&llmapi.ChatDelta{}, &fin)
	if c.includeUsage {
		chunk.Choices = []llmapi.ChatChoice{}
		chunk.Usage = c.usage()
		buf = appendSSEChunk(buf, &chunk)
	}
	return appendSSEData(buf, []byte("[DONE]"))
}

// Completions.

// parsePrompt reads a completions prompt: a string, token ids, or a
// one-element array of either.
func parsePrompt(raw json.RawMessage, req *CompleteRequest) *apiError {
	if len(raw) == 0 || string(raw) == "null" {
		return badRequest("prompt", "prompt is required")
	}
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &req.Prompt); err != nil {
			return badRequest("prompt", "invalid prompt: %v", err)
		}
		return nil
	}
	var ids []int32
	if err := json.Unmarshal(raw, &ids); err == nil {
		req.PromptIDs, req.IDsGiven = ids, true
		return nil
	}
	var many []json.RawMessage
	if err := json.Unmarshal(raw, &many); err != nil {
		return badRequest("prompt", "prompt must be a string, an array of token ids, or a one-element array of either")
	}
	if len(many) != 1 {
		return unsupported("prompt", "batched prompts (%d) are not supported: send one prompt per call", len(many))
	}
	return parsePrompt(many[0], req)
}

func decodeCompletion(p *Proxy, c *call) *apiError {
	var req llmapi.CompletionRequest
	if e := decodeJSON(c.body, &req); e != nil {
		return e
	}
	switch {
	case req.N != nil && *req.N != 1:
		return unsupported("n", "n=%d is not supported", *req.N)
	case req.BestOf != nil && *req.BestOf > 1:
		return unsupported("best_of", "best_of is not supported")
	case req.Echo:
		return unsupported("echo", "echo is not supported")
	case len(req.Logprobs) > 0 && string(req.Logprobs) != "null" && string(req.Logprobs) != "0":
		return unsupported("logprobs", "logprobs are recorded by the gateway but not returned to harnesses")
	case req.Suffix != nil && *req.Suffix != "":
		return unsupported("suffix", "suffix is not supported")
	}
	cr := &CompleteRequest{}
	if e := parsePrompt(req.Prompt, cr); e != nil {
		return e
	}
	stop, e := stopStrings(req.Stop, "stop")
	if e != nil {
		return e
	}
	cr.Stop = stop
	s := &cr.Sampling
	if req.Temperature != nil {
		s.Temperature = *req.Temperature
	}
	if req.TopP != nil {
		s.TopP = *req.TopP
	}
	if req.TopK != nil {
		s.TopK = *req.TopK
	}
	if req.MaxTokens != nil {
		s.MaxTokens = *req.MaxTokens
	} else if p.cfg.DefaultMaxTokens == 0 {
		s.MaxTokens = 16 // the API's documented default
	}
	if req.Seed != nil {
		s.Seed = uint64(*req.Seed)
	}
	cr.Model = req.Model
	if e := p.applyOverrides(c, &cr.Model, s, req.Temperature != nil); e != nil {
		return e
	}
	c.stream = req.Stream
	c.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	c.complete = cr
	return nil
}

func cmplFinish(r *Result) string {
	if r.FinishReason == engine.FinishLength {
		return "length"
	}
	return "stop"
}

func encodeCompletion(p *Proxy, c *call) ([]byte, error) {
	r := c.res
	fin := cmplFinish(r)
	text := r.Text
	resp := llmapi.ChatResponse{ID: c.id, Object: "text_completion", Created: c.created, Model: r.Model,
		Choices: []llmapi.ChatChoice{{Text: &text, FinishReason: &fin}}, Usage: c.usage()}
	return json.Marshal(&resp)
}

func streamCompletion(p *Proxy, c *call, buf []byte) []byte {
	r := c.res
	chunk := llmapi.ChatResponse{ID: c.id, Object: "text_completion", Created: c.created, Model: r.Model}
	text := r.Text
	chunk.Choices = []llmapi.ChatChoice{{Text: &text}}
	buf = appendSSEChunk(buf, &chunk)
	fin, empty := cmplFinish(r), ""
	chunk.Choices = []llmapi.ChatChoice{{Text: &empty, FinishReason: &fin}}
	buf = appendSSEChunk(buf, &chunk)
	if c.includeUsage {
		chunk.Choices = []llmapi.ChatChoice{}
		chunk.Usage = c.usage()
		buf = appendSSEChunk(buf, &chunk)
	}
	return appendSSEData(buf, []byte("[DONE]"))
}
