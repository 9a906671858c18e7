package proxy

import (
	"encoding/json"
	"strconv"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
)

// OpenAI Chat Completions and Completions ⇄ chat.Conversation.

type ccToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type ccMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Name             string          `json:"name"`
	ToolCalls        []ccToolCall    `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
	ReasoningContent string          `json:"reasoning_content"`
	FunctionCall     json.RawMessage `json:"function_call"`
	Audio            json.RawMessage `json:"audio"`

	// text is Content decoded, when isText (the fast decoder read it as
	// a string).
	text   string
	isText bool
}

type ccTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type ccRequest struct {
	Model               string          `json:"model"`
	Messages            []ccMessage     `json:"messages"`
	Tools               []ccTool        `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	Functions           json.RawMessage `json:"functions"`
	Temperature         *float32        `json:"temperature"`
	TopP                *float32        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	Stop                json.RawMessage `json:"stop"`
	Seed                *int64          `json:"seed"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ResponseFormat *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	Logprobs         bool            `json:"logprobs"`
	TopLogprobs      *int            `json:"top_logprobs"`
	LogitBias        map[string]any  `json:"logit_bias"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	Modalities       []string        `json:"modalities"`
	Audio            json.RawMessage `json:"audio"`
	Prediction       json.RawMessage `json:"prediction"`
	WebSearchOptions json.RawMessage `json:"web_search_options"`
}

// unsupportedChat rejects Chat Completions parameters the gateway cannot
// honour (rather than silently ignoring them).
func (r *ccRequest) unsupported() *apiError {
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
	case isSet(r.Audio):
		return unsupported("audio", "audio output is not supported")
	case isSet(r.Prediction):
		return unsupported("prediction", "predicted outputs are not supported")
	case isSet(r.WebSearchOptions):
		return unsupported("web_search_options", "web search is not supported")
	}
	return nil
}

func isSet(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

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
	var req ccRequest
	if !decodeChatFast(c.body, &req) {
		req = ccRequest{}
		if e := decodeJSON(c.body, &req); e != nil {
			return e
		}
	}
	if e := req.unsupported(); e != nil {
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
		text := m.text
		if !m.isText {
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

type ccUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type ccOutMessage struct {
	Role             string       `json:"role,omitempty"`
	Content          *string      `json:"content,omitempty"`
	ReasoningContent string       `json:"reasoning_content,omitempty"`
	ToolCalls        []ccToolCall `json:"tool_calls,omitempty"`
}

// ccFullMessage is a non-streamed message: content is null, not absent,
// when there is none (as OpenAI answers; harnesses read it unguarded).
type ccFullMessage struct {
	Role             string       `json:"role"`
	Content          *string      `json:"content"`
	ReasoningContent string       `json:"reasoning_content,omitempty"`
	ToolCalls        []ccToolCall `json:"tool_calls,omitempty"`
}

type ccChoice struct {
	Index        int            `json:"index"`
	Message      *ccFullMessage `json:"message,omitempty"`
	Delta        *ccOutMessage  `json:"delta,omitempty"`
	Text         *string        `json:"text,omitempty"`
	Logprobs     *struct{}      `json:"logprobs"`
	FinishReason *string        `json:"finish_reason"`
}

type ccResponse struct {
	ID      string     `json:"id"`
	Object  string     `json:"object"`
	Created int64      `json:"created"`
	Model   string     `json:"model"`
	Choices []ccChoice `json:"choices"`
	Usage   *ccUsage   `json:"usage,omitempty"`
}

func (c *call) usage() *ccUsage {
	r := c.res
	return &ccUsage{PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens, TotalTokens: r.PromptTokens + r.CompletionTokens}
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
	msg := &ccFullMessage{Role: chat.RoleAssistant, ReasoningContent: r.Message.Reasoning}
	if r.Message.Content != "" || len(r.Message.ToolCalls) == 0 {
		s := r.Message.Content
		msg.Content = &s
	}
	for _, tc := range r.Message.ToolCalls {
		var t ccToolCall
		t.ID, t.Type = tc.ID, "function"
		t.Function.Name, t.Function.Arguments = tc.Name, tc.Arguments
		msg.ToolCalls = append(msg.ToolCalls, t)
	}
	fin := chatFinish(r)
	resp := ccResponse{ID: c.id, Object: "chat.completion", Created: c.created, Model: r.Model,
		Choices: []ccChoice{{Message: msg, FinishReason: &fin}}, Usage: c.usage()}
	return json.Marshal(&resp)
}

// appendSSEChunk appends r as one unnamed server-sent event.
func appendSSEChunk(b []byte, r *ccResponse) []byte { return appendSSEData(b, mustJSON(r)) }

func streamChat(p *Proxy, c *call, buf []byte) []byte {
	r := c.res
	chunk := ccResponse{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: r.Model}
	emit := func(d *ccOutMessage, fin *string) {
		chunk.Choices = []ccChoice{{Delta: d, FinishReason: fin}}
		buf = appendSSEChunk(buf, &chunk)
	}
	empty := ""
	emit(&ccOutMessage{Role: chat.RoleAssistant, Content: &empty}, nil)
	if r.Message.Reasoning != "" {
		emit(&ccOutMessage{ReasoningContent: r.Message.Reasoning}, nil)
	}
	if r.Message.Content != "" {
		s := r.Message.Content
		emit(&ccOutMessage{Content: &s}, nil)
	}
	for i, tc := range r.Message.ToolCalls {
		idx := i
		var head ccToolCall
		head.Index, head.ID, head.Type = &idx, tc.ID, "function"
		head.Function.Name = tc.Name
		emit(&ccOutMessage{ToolCalls: []ccToolCall{head}}, nil)
		var args ccToolCall
		args.Index = &idx
		args.Function.Arguments = tc.Arguments
		emit(&ccOutMessage{ToolCalls: []ccToolCall{args}}, nil)
	}
	fin := chatFinish(r)
	emit(&ccOutMessage{}, &fin)
	if c.includeUsage {
		chunk.Choices = []ccChoice{}
		chunk.Usage = c.usage()
		buf = appendSSEChunk(buf, &chunk)
	}
	return appendSSEData(buf, []byte("[DONE]"))
}

// Completions.

type cmplRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Temperature   *float32        `json:"temperature"`
	TopP          *float32        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	MaxTokens     *int            `json:"max_tokens"`
	N             *int            `json:"n"`
	BestOf        *int            `json:"best_of"`
	Stop          json.RawMessage `json:"stop"`
	Seed          *int64          `json:"seed"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Echo     bool            `json:"echo"`
	Logprobs json.RawMessage `json:"logprobs"`
	Suffix   *string         `json:"suffix"`
}

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
	var req cmplRequest
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
	resp := ccResponse{ID: c.id, Object: "text_completion", Created: c.created, Model: r.Model,
		Choices: []ccChoice{{Text: &text, FinishReason: &fin}}, Usage: c.usage()}
	return json.Marshal(&resp)
}

func streamCompletion(p *Proxy, c *call, buf []byte) []byte {
	r := c.res
	chunk := ccResponse{ID: c.id, Object: "text_completion", Created: c.created, Model: r.Model}
	text := r.Text
	chunk.Choices = []ccChoice{{Text: &text}}
	buf = appendSSEChunk(buf, &chunk)
	fin, empty := cmplFinish(r), ""
	chunk.Choices = []ccChoice{{Text: &empty, FinishReason: &fin}}
	buf = appendSSEChunk(buf, &chunk)
	if c.includeUsage {
		chunk.Choices = []ccChoice{}
		chunk.Usage = c.usage()
		buf = appendSSEChunk(buf, &chunk)
	}
	return appendSSEData(buf, []byte("[DONE]"))
}
