package dashboard

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// Message is one turn of a conversation in a shape common to every API the
// gateway serves (Chat Completions, Completions, Responses, Anthropic
// Messages).
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
	IsError    bool   `json:"is_error,omitempty"`
}

// ToolCall is a tool call the model made.
type ToolCall struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Call is one model call as the harness saw it.
type Call struct {
	Seq          int64     `json:"seq"`
	Time         time.Time `json:"time"`
	CallID       string    `json:"call_id"`
	API          string    `json:"api"`
	Model        string    `json:"model"`
	ModelVersion int64     `json:"model_version"`
	// Agent is the agent that made the call ("" the default agent).
	Agent            string  `json:"agent,omitempty"`
	Stream           bool    `json:"stream,omitempty"`
	LatencyMS        float64 `json:"latency_ms"`
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	FinishReason     string  `json:"finish_reason,omitempty"`
	Continued        bool    `json:"continued"`
	RenderReason     string  `json:"render_reason,omitempty"`
	NoTokenIDs       bool    `json:"no_token_ids,omitempty"`
	// Tools names the tools the request declared.
	Tools []string `json:"tools,omitempty"`
	// Context counts the messages of the request already shown with
	// earlier calls; New holds the rest (tool results, new user turns).
	// When the request does not extend the previous call's conversation
	// (history edited or cut), Rewritten is set and New holds all of it.
	Context   int       `json:"context"`
	New       []Message `json:"new"`
	Rewritten bool      `json:"rewritten,omitempty"`
	// Reply is what the model answered (a stream's assembled reply).
	Reply *Message `json:"reply,omitempty"`
	// Error says why the request or response could not be read.
	Error string `json:"error,omitempty"`
	// HTTPStatus and Refusal are set for a call the gateway refused or
	// that failed (api.CallError): the status and error body the harness
	// got. Such a call has no messages and leaves the conversation as it
	// was.
	HTTPStatus int    `json:"http_status,omitempty"`
	Refusal    string `json:"refusal,omitempty"`
}

// callEvent is the part of an api.ModelCall the conversation shows: the
// token arrays are skipped, not decoded.
type callEvent struct {
	CallID       string          `json:"call_id"`
	API          string          `json:"api"`
	Model        string          `json:"model"`
	ModelVersion int64           `json:"model_version"`
	Agent        string          `json:"agent"`
	NoTokenIDs   bool            `json:"no_token_ids"`
	FinishReason string          `json:"finish_reason"`
	Continued    bool            `json:"continued"`
	RenderReason string          `json:"render_reason"`
	Request      json.RawMessage `json:"request"`
	Response     json.RawMessage `json:"response"`
	Usage        api.Usage       `json:"usage"`
	LatencyMS    float64         `json:"latency_ms"`
	Stream       bool            `json:"stream"`
	Status       string          `json:"status"`
	HTTPStatus   int             `json:"http_status"`
	Error        string          `json:"error"`
}

// Conversation turns an attempt's model_request events (in sequence order)
// into the conversation the harness had: each call with the messages it
// added and the model's reply. Each agent's calls continue that agent's
// own conversation.
func Conversation(events []store.Event) []Call {
	out := make([]Call, 0, len(events))
	prevOf := map[string][]Message{} // per agent: the previous call's request + reply
	names := map[string]string{}
	for _, e := range events {
		var mc callEvent
		c := Call{Seq: e.Seq, Time: e.Time}
		if err := json.Unmarshal(e.Data, &mc); err != nil {
			c.Error = "event data is not a model call: " + err.Error()
			out = append(out, c)
			continue
		}
		c.CallID, c.API, c.Model, c.ModelVersion, c.Agent = mc.CallID, mc.API, mc.Model, mc.ModelVersion, mc.Agent
		prev := prevOf[mc.Agent]
		c.Stream, c.LatencyMS, c.FinishReason = mc.Stream, mc.LatencyMS, mc.FinishReason
		c.PromptTokens, c.CompletionTokens = mc.Usage.PromptTokens, mc.Usage.CompletionTokens
		c.Continued, c.RenderReason, c.NoTokenIDs = mc.Continued, mc.RenderReason, mc.NoTokenIDs
		if mc.Status == api.CallError {
			c.HTTPStatus, c.Refusal, c.New = mc.HTTPStatus, mc.Error, []Message{}
			out = append(out, c)
			continue
		}
		msgs, tools, reply, err := parseCall(mc.API, mc.Request, mc.Response)
		if err != "" {
			c.Error = err
		}
		c.Tools = tools
		for _, m := range msgs {
			for _, tc := range m.ToolCalls {
				if tc.ID != "" {
					names[tc.ID] = tc.Name
				}
			}
		}
		if reply != nil {
			for _, tc := range reply.ToolCalls {
				if tc.ID != "" {
					names[tc.ID] = tc.Name
				}
			}
		}
		for i := range msgs {
			if msgs[i].Role == "tool" && msgs[i].Name == "" {
				msgs[i].Name = names[msgs[i].ToolCallID]
			}
		}
		if extends(msgs, prev) {
			c.Context, c.New = len(prev), msgs[len(prev):]
		} else {
			c.New, c.Rewritten = msgs, len(prev) > 0
		}
		if c.New == nil {
			c.New = []Message{}
		}
		c.Reply = reply
		prevOf[mc.Agent] = append(msgs[:len(msgs):len(msgs)], derefs(reply)...)
		out = append(out, c)
	}
	return out
}

func derefs(m *Message) []Message {
	if m == nil {
		return nil
	}
	return []Message{*m}
}

// extends reports whether msgs starts with prev (compared by role, text and
// tool calls' names and arguments: ids and whitespace may be re-rendered).
func extends(msgs, prev []Message) bool {
	if len(prev) > len(msgs) {
		return false
	}
	for i, p := range prev {
		m := msgs[i]
		if m.Role != p.Role || strings.TrimSpace(m.Text) != strings.TrimSpace(p.Text) || len(m.ToolCalls) != len(p.ToolCalls) {
			return false
		}
		for k := range p.ToolCalls {
			if m.ToolCalls[k].Name != p.ToolCalls[k].Name || compactJSON(m.ToolCalls[k].Arguments) != compactJSON(p.ToolCalls[k].Arguments) {
				return false
			}
		}
	}
	return true
}

func compactJSON(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) == nil {
		return b.String()
	}
	return strings.TrimSpace(s)
}

// parseCall reads a call's request messages, declared tools and reply in
// the API shape they were sent in. Parsing is lenient: what cannot be read
// is left out and named in errText.
func parseCall(shape string, req, resp json.RawMessage) (msgs []Message, tools []string, reply *Message, errText string) {
	switch shape {
	case api.ShapeChatCompletions:
		return parseChat(req, resp)
	case api.ShapeCompletions:
		return parseCompletion(req, resp)
	case api.ShapeResponses:
		return parseResponses(req, resp)
	case api.ShapeMessages:
		return parseMessages(req, resp)
	case api.ShapeGenerateContent:
		return parseGemini(req, resp)
	}
	return nil, nil, nil, "unknown API shape " + shape
}

// text reads content that is a string, null, or a list of parts with a
// "text" field (OpenAI and Anthropic text parts alike).
func text(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
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

// args renders tool arguments: a JSON string as is, anything else as JSON.
func args(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if len(raw) == 0 {
		return ""
	}
	return string(raw)
}

type chatMsg struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Reasoning  string          `json:"reasoning_content"`
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func (c chatMsg) message() Message {
	m := Message{Role: c.Role, Text: text(c.Content), Reasoning: c.Reasoning, ToolCallID: c.ToolCallID}
	if c.Role == "tool" {
		m.Name = c.Name
	}
	for _, tc := range c.ToolCalls {
		m.ToolCalls = append(m.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args(tc.Function.Arguments)})
	}
	return m
}

func parseChat(req, resp json.RawMessage) ([]Message, []string, *Message, string) {
	var rq struct {
		Messages []chatMsg `json:"messages"`
		Tools    []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	var errs []string
	if err := json.Unmarshal(req, &rq); err != nil {
		errs = append(errs, "request: "+err.Error())
	}
	var msgs []Message
	for _, m := range rq.Messages {
		msgs = append(msgs, m.message())
	}
	var tools []string
	for _, t := range rq.Tools {
		tools = append(tools, t.Function.Name)
	}
	var rs struct {
		Choices []struct {
			Message chatMsg `json:"message"`
		} `json:"choices"`
	}
	var reply *Message
	if err := json.Unmarshal(resp, &rs); err != nil {
		errs = append(errs, "response: "+err.Error())
	} else if len(rs.Choices) > 0 {
		m := rs.Choices[0].Message.message()
		m.Role = "assistant"
		reply = &m
	}
	return msgs, tools, reply, strings.Join(errs, "; ")
}

func parseCompletion(req, resp json.RawMessage) ([]Message, []string, *Message, string) {
	var rq struct {
		Prompt json.RawMessage `json:"prompt"`
	}
	var errs []string
	if err := json.Unmarshal(req, &rq); err != nil {
		errs = append(errs, "request: "+err.Error())
	}
	prompt := text(rq.Prompt)
	var list []string
	if json.Unmarshal(rq.Prompt, &list) == nil {
		prompt = strings.Join(list, "\n")
	}
	msgs := []Message{{Role: "user", Text: prompt}}
	var rs struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	var reply *Message
	if err := json.Unmarshal(resp, &rs); err != nil {
		errs = append(errs, "response: "+err.Error())
	} else if len(rs.Choices) > 0 {
		reply = &Message{Role: "assistant", Text: rs.Choices[0].Text}
	}
	return msgs, nil, reply, strings.Join(errs, "; ")
}

// respItem is a Responses API input or output item.
type respItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Input     json.RawMessage `json:"input"`
	Output    json.RawMessage `json:"output"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

// responsesItems turns items into messages, gathering consecutive
// assistant items (reasoning, text, tool calls) into one message.
func responsesItems(items []respItem) []Message {
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
				a.Text += text(it.Content)
				continue
			}
			out = append(out, Message{Role: it.Role, Text: text(it.Content)})
		case "function_call":
			a := assistant()
			a.ToolCalls = append(a.ToolCalls, ToolCall{ID: it.CallID, Name: it.Name, Arguments: args(it.Arguments)})
		case "custom_tool_call":
			a := assistant()
			a.ToolCalls = append(a.ToolCalls, ToolCall{ID: it.CallID, Name: it.Name, Arguments: args(it.Input)})
		case "function_call_output", "custom_tool_call_output":
			out = append(out, Message{Role: "tool", ToolCallID: it.CallID, Text: text(it.Output)})
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

func parseResponses(req, resp json.RawMessage) ([]Message, []string, *Message, string) {
	var rq struct {
		Instructions string          `json:"instructions"`
		Input        json.RawMessage `json:"input"`
		Tools        []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	var errs []string
	if err := json.Unmarshal(req, &rq); err != nil {
		errs = append(errs, "request: "+err.Error())
	}
	var msgs []Message
	if rq.Instructions != "" {
		msgs = append(msgs, Message{Role: "system", Text: rq.Instructions})
	}
	var s string
	var items []respItem
	switch {
	case json.Unmarshal(rq.Input, &s) == nil:
		msgs = append(msgs, Message{Role: "user", Text: s})
	case json.Unmarshal(rq.Input, &items) == nil:
		msgs = append(msgs, responsesItems(items)...)
	}
	var tools []string
	for _, t := range rq.Tools {
		tools = append(tools, t.Name)
	}
	var rs struct {
		Output []respItem `json:"output"`
	}
	var reply *Message
	if err := json.Unmarshal(resp, &rs); err != nil {
		errs = append(errs, "response: "+err.Error())
	} else if out := responsesItems(rs.Output); len(out) > 0 {
		m := out[0]
		for _, o := range out[1:] { // an answer is one assistant turn
			m.Text += o.Text
			m.ToolCalls = append(m.ToolCalls, o.ToolCalls...)
		}
		m.Role = "assistant"
		reply = &m
	}
	return msgs, tools, reply, strings.Join(errs, "; ")
}

type amBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// amMessage turns one Anthropic message into messages: tool results become
// tool messages of their own.
func amMessage(role string, content json.RawMessage) []Message {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return []Message{{Role: role, Text: s}}
	}
	var blocks []amBlock
	if json.Unmarshal(content, &blocks) != nil {
		return []Message{{Role: role, Text: string(content)}}
	}
	var out []Message
	cur := Message{Role: role}
	flush := func() {
		if cur.Text != "" || cur.Reasoning != "" || len(cur.ToolCalls) > 0 {
			out = append(out, cur)
		}
		cur = Message{Role: role}
	}
	for _, b := range blocks {
		switch b.Type {
		case "text":
			cur.Text += b.Text
		case "thinking":
			cur.Reasoning += b.Thinking
		case "tool_use":
			cur.ToolCalls = append(cur.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: args(b.Input)})
		case "tool_result":
			flush()
			out = append(out, Message{Role: "tool", ToolCallID: b.ToolUseID, Text: text(b.Content), IsError: b.IsError})
		default:
			cur.Text += "[" + b.Type + "]"
		}
	}
	flush()
	return out
}

func parseMessages(req, resp json.RawMessage) ([]Message, []string, *Message, string) {
	var rq struct {
		System   json.RawMessage `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	var errs []string
	if err := json.Unmarshal(req, &rq); err != nil {
		errs = append(errs, "request: "+err.Error())
	}
	var msgs []Message
	if sys := text(rq.System); sys != "" {
		msgs = append(msgs, Message{Role: "system", Text: sys})
	}
	for _, m := range rq.Messages {
		msgs = append(msgs, amMessage(m.Role, m.Content)...)
	}
	var tools []string
	for _, t := range rq.Tools {
		tools = append(tools, t.Name)
	}
	var rs struct {
		Content json.RawMessage `json:"content"`
	}
	var reply *Message
	if err := json.Unmarshal(resp, &rs); err != nil {
		errs = append(errs, "response: "+err.Error())
	} else if out := amMessage("assistant", rs.Content); len(out) > 0 {
		reply = &out[0]
	} else {
		reply = &Message{Role: "assistant"}
	}
	return msgs, tools, reply, strings.Join(errs, "; ")
}

// gmContent is a Gemini API Content: a role and its parts.
type gmContent struct {
	Role  string `json:"role"`
	Parts []struct {
		Text         *string `json:"text"`
		Thought      bool    `json:"thought"`
		FunctionCall *struct {
			ID   string          `json:"id"`
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		} `json:"functionCall"`
		FunctionResponse *struct {
			ID       string          `json:"id"`
			Name     string          `json:"name"`
			Response json.RawMessage `json:"response"`
		} `json:"functionResponse"`
	} `json:"parts"`
}

// gmMessages turns one Content into messages: text and thoughts and calls
// of a "model" turn into one assistant message, a "user" turn's function
// responses into tool results.
func gmMessages(c gmContent) []Message {
	role := "user"
	if c.Role == "model" {
		role = "assistant"
	}
	var out []Message
	cur := Message{Role: role}
	flush := func() {
		if cur.Text != "" || cur.Reasoning != "" || len(cur.ToolCalls) > 0 {
			out = append(out, cur)
		}
		cur = Message{Role: role}
	}
	for _, p := range c.Parts {
		switch {
		case p.Text != nil && p.Thought:
			cur.Reasoning += *p.Text
		case p.Text != nil:
			if role == "user" && cur.Text != "" {
				cur.Text += "\n"
			}
			cur.Text += *p.Text
		case p.FunctionCall != nil:
			cur.ToolCalls = append(cur.ToolCalls, ToolCall{ID: p.FunctionCall.ID, Name: p.FunctionCall.Name, Arguments: args(p.FunctionCall.Args)})
		case p.FunctionResponse != nil:
			flush()
			out = append(out, Message{Role: "tool", ToolCallID: p.FunctionResponse.ID, Name: p.FunctionResponse.Name, Text: gmResult(p.FunctionResponse.Response)})
		}
	}
	flush()
	return out
}

// gmResult is a function response's text: the output string Gemini CLI
// sends ({"output": "…"}), else the response object.
func gmResult(raw json.RawMessage) string {
	var r map[string]json.RawMessage
	if json.Unmarshal(raw, &r) == nil && len(r) == 1 {
		var s string
		if json.Unmarshal(r["output"], &s) == nil {
			return s
		}
	}
	return compactJSON(string(raw))
}

// parseGemini reads a Gemini API generateContent call.
func parseGemini(req, resp json.RawMessage) ([]Message, []string, *Message, string) {
	var rq struct {
		SystemInstruction *gmContent  `json:"systemInstruction"`
		Contents          []gmContent `json:"contents"`
		Tools             []struct {
			FunctionDeclarations []struct {
				Name string `json:"name"`
			} `json:"functionDeclarations"`
		} `json:"tools"`
	}
	var errs []string
	if err := json.Unmarshal(req, &rq); err != nil {
		errs = append(errs, "request: "+err.Error())
	}
	var msgs []Message
	if si := rq.SystemInstruction; si != nil {
		var sys []string
		for _, p := range si.Parts {
			if p.Text != nil {
				sys = append(sys, *p.Text)
			}
		}
		msgs = append(msgs, Message{Role: "system", Text: strings.Join(sys, "\n")})
	}
	for _, c := range rq.Contents {
		msgs = append(msgs, gmMessages(c)...)
	}
	var tools []string
	for _, t := range rq.Tools {
		for _, fd := range t.FunctionDeclarations {
			tools = append(tools, fd.Name)
		}
	}
	var rs struct {
		Candidates []struct {
			Content gmContent `json:"content"`
		} `json:"candidates"`
	}
	reply := &Message{Role: "assistant"}
	if err := json.Unmarshal(resp, &rs); err != nil {
		errs = append(errs, "response: "+err.Error())
	} else if len(rs.Candidates) > 0 {
		rs.Candidates[0].Content.Role = "model"
		if out := gmMessages(rs.Candidates[0].Content); len(out) > 0 {
			reply = &out[0]
		}
	}
	return msgs, tools, reply, strings.Join(errs, "; ")
}
