package llmapi

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/aglrl/agl/api"
)

// Message is one turn of a conversation in a shape common to the five API
// shapes (Chat Completions, Completions, Responses, Anthropic Messages,
// Gemini generateContent).
type Message struct {
	// Role is system, developer, user, assistant or tool.
	Role string `json:"role"`
	Text string `json:"text,omitempty"`
	// Reasoning is the model's visible reasoning (thinking) text.
	Reasoning string     `json:"reasoning,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID and Name say which call a tool result answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	Name       string `json:"name,omitempty"`
	// IsError is set on a tool result the harness marked as failed: an
	// Anthropic tool_result with is_error, a Gemini functionResponse
	// whose response has an "error" member. The OpenAI shapes have no
	// such mark.
	IsError bool `json:"is_error,omitempty"`
}

// ToolCall is a tool call the model made.
type ToolCall struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Call is what one model call's recorded request and response say: the
// request's messages and declared tools, and the model's reply.
type Call struct {
	Messages []Message
	// Tools names the tools the request declared.
	Tools []string
	// Reply is the model's answer as one assistant message; nil when the
	// response has none.
	Reply *Message
}

// ParseCall reads a call's request and response in the API shape they
// were sent in (api.Shape*). Reading is lenient, for bodies recorded
// earlier: what cannot be read is left out, and the error says what and
// why ("request: …; response: …").
func ParseCall(shape string, req, resp []byte) (Call, error) {
	var c Call
	var reqErr, respErr error
	switch shape {
	case api.ShapeChatCompletions:
		reqErr = c.chatRequest(req)
		respErr = c.chatReply(resp, false)
	case api.ShapeCompletions:
		reqErr = c.completionRequest(req)
		respErr = c.chatReply(resp, true)
	case api.ShapeResponses:
		reqErr = c.responsesRequest(req)
		respErr = c.responsesReply(resp)
	case api.ShapeMessages:
		reqErr = c.anthropicRequest(req)
		respErr = c.anthropicReply(resp)
	case api.ShapeGenerateContent:
		reqErr = c.geminiRequest(req)
		respErr = c.geminiReply(resp)
	default:
		return c, errors.New("unknown API shape " + shape)
	}
	var errs []string
	if reqErr != nil {
		errs = append(errs, "request: "+reqErr.Error())
	}
	if respErr != nil {
		errs = append(errs, "response: "+respErr.Error())
	}
	if errs != nil {
		return c, errors.New(strings.Join(errs, "; "))
	}
	return c, nil
}

// contentText reads content that is a string, null, or a list of parts
// with a "text" field (OpenAI and Anthropic text parts alike); a part of
// another type without text shows as "[type]". Other JSON is kept as it
// is.
func contentText(raw json.RawMessage) string {
	if !IsSet(raw) {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			if p.Text == "" && p.Type != "" && p.Type != "text" && !strings.HasSuffix(p.Type, "_text") {
				b.WriteString("[" + p.Type + "]")
				continue
			}
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return string(raw)
}

// arguments renders tool arguments given as JSON: a string as it is,
// anything else as JSON.
func arguments(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// message is m in the common shape.
func (m *ChatMessage) message() Message {
	text, ok := m.ContentString()
	if !ok {
		text = contentText(m.Content)
	}
	out := Message{Role: m.Role, Text: text, Reasoning: m.ReasoningContent, ToolCallID: m.ToolCallID}
	if m.Role == "tool" {
		out.Name = m.Name
	}
	for _, tc := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return out
}

func (c *Call) chatRequest(req []byte) error {
	var rq ChatRequest
	var err error
	if !DecodeChatFast(req, &rq) {
		rq = ChatRequest{}
		err = json.Unmarshal(req, &rq)
	}
	for i := range rq.Messages {
		c.Messages = append(c.Messages, rq.Messages[i].message())
	}
	for _, t := range rq.Tools {
		c.Tools = append(c.Tools, t.Function.Name)
	}
	return err
}

// chatAnswer is a Chat Completions or Completions response, its message
// read as the message it becomes in the next request.
type chatAnswer struct {
	Choices []struct {
		Message ChatMessage `json:"message"`
		Text    string      `json:"text"`
	} `json:"choices"`
}

// chatReply reads the first choice's message (text: its completion).
func (c *Call) chatReply(resp []byte, text bool) error {
	var rs chatAnswer
	if err := json.Unmarshal(resp, &rs); err != nil {
		return err
	}
	if len(rs.Choices) == 0 {
		return nil
	}
	ch := &rs.Choices[0]
	m := Message{Text: ch.Text}
	if !text {
		m = ch.Message.message()
	}
	m.Role = "assistant"
	c.Reply = &m
	return nil
}

func (c *Call) completionRequest(req []byte) error {
	var rq CompletionRequest
	err := json.Unmarshal(req, &rq)
	prompt := contentText(rq.Prompt)
	var list []string
	if json.Unmarshal(rq.Prompt, &list) == nil {
		prompt = strings.Join(list, "\n")
	}
	c.Messages = []Message{{Role: "user", Text: prompt}}
	return err
}

// responsesItems turns items into messages, gathering consecutive
// assistant items (reasoning, text, tool calls) into one message.
func responsesItems(items []ResponsesItem) []Message {
	var out []Message
	assistant := func() *Message {
		if n := len(out); n > 0 && out[n-1].Role == "assistant" {
			return &out[n-1]
		}
		out = append(out, Message{Role: "assistant"})
		return &out[len(out)-1]
	}
	for _, it := range items {
		switch it.Type {
		case "", "message":
			if it.Role == "assistant" {
				a := assistant()
				a.Text += contentText(it.Content)
				continue
			}
			out = append(out, Message{Role: it.Role, Text: contentText(it.Content)})
		case "function_call":
			a := assistant()
			a.ToolCalls = append(a.ToolCalls, ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments})
		case "custom_tool_call":
			a := assistant()
			a.ToolCalls = append(a.ToolCalls, ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Input})
		case "function_call_output", "custom_tool_call_output":
			out = append(out, Message{Role: "tool", ToolCallID: it.CallID, Text: contentText(it.Output)})
		case "reasoning":
			a := assistant()
			for _, s := range it.Summary {
				a.Reasoning += s.Text
			}
		default:
			out = append(out, Message{Role: "user", Text: "[" + it.Type + "]"})
		}
	}
	return out
}

func (c *Call) responsesRequest(req []byte) error {
	var rq ResponsesRequest
	err := json.Unmarshal(req, &rq)
	if rq.Instructions != nil && *rq.Instructions != "" {
		c.Messages = append(c.Messages, Message{Role: "system", Text: *rq.Instructions})
	}
	var s string
	var items []ResponsesItem
	switch {
	case json.Unmarshal(rq.Input, &s) == nil:
		c.Messages = append(c.Messages, Message{Role: "user", Text: s})
	case json.Unmarshal(rq.Input, &items) == nil:
		c.Messages = append(c.Messages, responsesItems(items)...)
	}
	for _, t := range rq.Tools {
		c.Tools = append(c.Tools, t.Name)
	}
	return err
}

// responsesReply reads a response's output items, as they come back as
// input items, into one assistant turn.
func (c *Call) responsesReply(resp []byte) error {
	var rs struct {
		Output []ResponsesItem `json:"output"`
	}
	if err := json.Unmarshal(resp, &rs); err != nil {
		return err
	}
	out := responsesItems(rs.Output)
	if len(out) == 0 {
		return nil
	}
	m := out[0]
	for _, o := range out[1:] { // an answer is one assistant turn
		m.Text += o.Text
		m.ToolCalls = append(m.ToolCalls, o.ToolCalls...)
	}
	m.Role = "assistant"
	c.Reply = &m
	return nil
}

// anthropicMessage turns one Anthropic message into messages: tool
// results become tool messages of their own.
func anthropicMessage(role string, content json.RawMessage) []Message {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return []Message{{Role: role, Text: s}}
	}
	var blocks []AnthropicBlock
	if json.Unmarshal(content, &blocks) != nil {
		return []Message{{Role: role, Text: string(content)}}
	}
	t := turn{cur: Message{Role: role}}
	cur := &t.cur
	for _, b := range blocks {
		switch b.Type {
		case "text":
			cur.Text += b.Text
		case "thinking":
			cur.Reasoning += b.Thinking
		case "tool_use":
			cur.ToolCalls = append(cur.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: arguments(b.Input)})
		case "tool_result":
			t.result(Message{Role: "tool", ToolCallID: b.ToolUseID, Text: contentText(b.Content), IsError: b.IsError})
		default:
			cur.Text += "[" + b.Type + "]"
		}
	}
	return t.done()
}

// turn gathers the parts of one API message (an Anthropic message, a
// Gemini Content) into messages: text, reasoning and tool calls into the
// current one; each tool result into a message of its own, after it.
type turn struct {
	out []Message
	cur Message
}

// flush ends the current message (kept when it says anything).
func (t *turn) flush() {
	if t.cur.Text != "" || t.cur.Reasoning != "" || len(t.cur.ToolCalls) > 0 {
		t.out = append(t.out, t.cur)
	}
	t.cur = Message{Role: t.cur.Role}
}

// result adds a tool result.
func (t *turn) result(m Message) {
	t.flush()
	t.out = append(t.out, m)
}

func (t *turn) done() []Message {
	t.flush()
	return t.out
}

func (c *Call) anthropicRequest(req []byte) error {
	var rq AnthropicRequest
	err := json.Unmarshal(req, &rq)
	if sys := contentText(rq.System); sys != "" {
		c.Messages = append(c.Messages, Message{Role: "system", Text: sys})
	}
	for _, m := range rq.Messages {
		c.Messages = append(c.Messages, anthropicMessage(m.Role, m.Content)...)
	}
	for _, t := range rq.Tools {
		c.Tools = append(c.Tools, t.Name)
	}
	return err
}

func (c *Call) anthropicReply(resp []byte) error {
	var rs struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(resp, &rs); err != nil {
		return err
	}
	c.Reply = &Message{Role: "assistant"}
	if out := anthropicMessage("assistant", rs.Content); len(out) > 0 {
		c.Reply = &out[0]
	}
	return nil
}

// geminiMessages turns one Content into messages: the text, thoughts and
// calls of a "model" turn into one assistant message, a "user" turn's
// function responses into tool results.
func geminiMessages(ct *GeminiContent) []Message {
	role := "user"
	if ct.Role == "model" {
		role = "assistant"
	}
	t := turn{cur: Message{Role: role}}
	cur := &t.cur
	for i := range ct.Parts {
		p := &ct.Parts[i]
		switch {
		case p.Text != nil && p.Thought:
			cur.Reasoning += *p.Text
		case p.Text != nil:
			if role == "user" && cur.Text != "" {
				cur.Text += "\n"
			}
			cur.Text += *p.Text
		case p.FunctionCall != nil:
			cur.ToolCalls = append(cur.ToolCalls, ToolCall{ID: p.FunctionCall.ID, Name: p.FunctionCall.Name, Arguments: arguments(p.FunctionCall.Args)})
		case p.FunctionResponse != nil:
			fr := p.FunctionResponse
			t.result(Message{Role: "tool", ToolCallID: fr.ID, Name: fr.Name, Text: GeminiFunctionResult(fr.Response), IsError: geminiFailed(fr.Response)})
		}
	}
	return t.done()
}

// geminiFailed reports whether a function response has an "error" member
// (Gemini CLI's failed tools).
func geminiFailed(response json.RawMessage) bool {
	var r struct {
		Error json.RawMessage `json:"error"`
	}
	return json.Unmarshal(response, &r) == nil && IsSet(r.Error)
}

func (c *Call) geminiRequest(req []byte) error {
	var rq GeminiRequest
	err := json.Unmarshal(req, &rq)
	if IsSet(rq.SystemInstruction) {
		var si GeminiContent
		if e := json.Unmarshal(rq.SystemInstruction, &si); e != nil && err == nil {
			err = e
		}
		var sys []string
		for _, p := range si.Parts {
			if p.Text != nil {
				sys = append(sys, *p.Text)
			}
		}
		c.Messages = append(c.Messages, Message{Role: "system", Text: strings.Join(sys, "\n")})
	}
	for _, raw := range rq.Contents {
		var ct GeminiContent
		if e := json.Unmarshal(raw, &ct); e != nil && err == nil {
			err = e
		}
		c.Messages = append(c.Messages, geminiMessages(&ct)...)
	}
	for _, raw := range rq.Tools {
		var t struct {
			FunctionDeclarations []GeminiFunctionDeclaration `json:"functionDeclarations"`
		}
		if e := json.Unmarshal(raw, &t); e != nil && err == nil {
			err = e
		}
		for _, fd := range t.FunctionDeclarations {
			c.Tools = append(c.Tools, fd.Name)
		}
	}
	return err
}

// geminiReply reads the first candidate's content as a "model" turn.
func (c *Call) geminiReply(resp []byte) error {
	c.Reply = &Message{Role: "assistant"}
	var rs struct {
		Candidates []struct {
			Content GeminiContent `json:"content"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal(resp, &rs); err != nil {
		return err
	}
	if len(rs.Candidates) > 0 {
		ct := &rs.Candidates[0].Content
		ct.Role = "model"
		if out := geminiMessages(ct); len(out) > 0 {
			c.Reply = &out[0]
		}
	}
	return nil
}
