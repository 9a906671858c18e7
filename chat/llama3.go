package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aglrl/agl/tokenizer"
)

// Llama 3 special tokens.
const (
	TokBeginOfText = "<|begin_of_text|>"
	TokEndOfText3  = "<|end_of_text|>"
	TokHeaderStart = "<|start_header_id|>"
	TokHeaderEnd   = "<|end_header_id|>"
	TokEOT         = "<|eot_id|>"
	TokEOM         = "<|eom_id|>"
)

// Llama3 is the Llama 3 / 3.1 chat template:
//
//	<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{system}{tools}<|eot_id|>
//	<|start_header_id|>user<|end_header_id|>\n\n{text}<|eot_id|>
//	<|start_header_id|>assistant<|end_header_id|>\n\n{text}\n{"name": "f", "parameters": {...}}<|eot_id|>
//	<|start_header_id|>ipython<|end_header_id|>\n\n{result}<|eot_id|>
//	<|start_header_id|>assistant<|end_header_id|>\n\n
//
// Without tools it renders what Llama 3's own template renders (text
// trimmed; a continuation keeps a reply as generated), the generation
// prompt being optional. Tools follow Llama
// 3.1's JSON tool calling: definitions as JSON in the system message, each
// call one JSON object {"name", "parameters"} on its own line, results as
// "ipython" turns. Reasoning is not rendered.
type Llama3 struct {
	tok   tokenizer.Tokenizer
	bos   int32
	eot   int32
	stops []int32
	// ToolCallID is as ChatMLOptions.ToolCallID.
	toolCallID func(reply []int32, i int) string
}

var _ Template = (*Llama3)(nil)

// NewLlama3 returns the Llama 3 template over tok, which must have
// <|begin_of_text|>, <|start_header_id|>, <|end_header_id|> and <|eot_id|>.
func NewLlama3(tok tokenizer.Tokenizer) (*Llama3, error) {
	if tok == nil {
		return nil, fmt.Errorf("chat: nil tokenizer")
	}
	ids := map[string]int32{}
	for _, s := range []string{TokBeginOfText, TokHeaderStart, TokHeaderEnd, TokEOT} {
		id, ok := tok.TokenID(s)
		if !ok {
			return nil, fmt.Errorf("chat: tokenizer has no %s token; the Llama 3 template needs it", s)
		}
		ids[s] = id
	}
	t := &Llama3{tok: tok, bos: ids[TokBeginOfText], eot: ids[TokEOT], stops: []int32{ids[TokEOT]}}
	for _, s := range []string{TokEOM, TokEndOfText3} {
		if id, ok := tok.TokenID(s); ok {
			t.stops = append(t.stops, id)
		}
	}
	return t, nil
}

// Tokenizer returns the template's tokenizer.
func (t *Llama3) Tokenizer() tokenizer.Tokenizer { return t.tok }

// StopIDs implements [Template]: <|eot_id|>, then <|eom_id|> and
// <|end_of_text|> where the tokenizer has them. The extension property
// assumes the reply ended with <|eot_id|> (EndOfTurnID).
func (t *Llama3) StopIDs() []int32 { return append([]int32(nil), t.stops...) }

// EndOfTurnID is the id of <|eot_id|>.
func (t *Llama3) EndOfTurnID() int32 { return t.eot }

// WithToolCallID returns a copy of t whose Parse names tool calls with f.
func (t *Llama3) WithToolCallID(f func(reply []int32, i int) string) *Llama3 {
	c := *t
	c.toolCallID = f
	return &c
}

// Render implements [Template].
func (t *Llama3) Render(c Conversation, addGenerationPrompt bool) ([]int32, error) {
	r := &renderer{tok: t.tok}
	if err := t.render(r, c, addGenerationPrompt); err != nil {
		return nil, err
	}
	return r.ids, nil
}

// RenderMasked is as ChatML.RenderMasked: the mask marks each assistant
// reply and its <|eot_id|>.
func (t *Llama3) RenderMasked(c Conversation) ([]int32, []bool, error) {
	r := &renderer{tok: t.tok, masking: true}
	if err := t.render(r, c, false); err != nil {
		return nil, nil, err
	}
	return r.ids, r.mask, nil
}

func (t *Llama3) render(r *renderer, c Conversation, gen bool) error {
	if err := validateCommon(c); err != nil {
		return err
	}
	ms := c.Messages
	if len(ms) == 0 && len(c.Tools) == 0 && !gen {
		return nil
	}
	r.text(TokBeginOfText)
	from := 0
	if len(c.Tools) > 0 {
		sys := ""
		if len(ms) > 0 && ms[0].Role == RoleSystem {
			sys = strings.TrimSpace(ms[0].Content) + "\n\n"
			from = 1
		}
		tools, err := llamaTools(c.Tools)
		if err != nil {
			return err
		}
		r.text(header("system") + sys + tools + TokEOT)
	}
	t.messages(r, ms, from, true)
	if gen {
		r.text(header(RoleAssistant))
	}
	r.cut(false)
	return nil
}

// RenderSuffix implements [Template].
func (t *Llama3) RenderSuffix(c Conversation, from int) ([]int32, error) {
	if from < 1 || from > len(c.Messages) {
		return nil, fmt.Errorf("chat: RenderSuffix from %d out of range [1, %d]", from, len(c.Messages))
	}
	if role := c.Messages[from-1].Role; role != RoleAssistant {
		return nil, fmt.Errorf("chat: RenderSuffix: message %d is %q, want the assistant reply", from-1, role)
	}
	if err := validateCommon(c); err != nil {
		return nil, err
	}
	r := &renderer{tok: t.tok}
	t.messages(r, c.Messages, from, false)
	r.text(header(RoleAssistant))
	r.cut(false)
	return r.ids, nil
}

func header(role string) string { return TokHeaderStart + role + TokHeaderEnd + "\n\n" }

// messages renders ms[from:]; from scratch, assistant text is trimmed as
// Llama 3's template trims every message (a continuation, RenderSuffix,
// follows the reply as generated).
func (t *Llama3) messages(r *renderer, ms []Message, from int, scratch bool) {
	for i := from; i < len(ms); i++ {
		m := ms[i]
		if scratch && m.Role == RoleAssistant {
			m.Content = strings.TrimSpace(m.Content)
		}
		switch m.Role {
		case RoleSystem, RoleUser:
			r.text(header(m.Role) + strings.TrimSpace(m.Content) + TokEOT)
		case RoleTool:
			r.text(header("ipython") + strings.TrimSpace(m.Content) + TokEOT)
		case RoleAssistant:
			r.text(header(RoleAssistant))
			r.cut(false)
			r.text(llamaReply(m) + TokEOT)
			r.cut(true)
		}
	}
}

// llamaReply is what the model generates for m, without <|eot_id|>.
func llamaReply(m Message) string {
	var sb strings.Builder
	sb.WriteString(m.Content)
	for i, tc := range m.ToolCalls {
		if i > 0 || m.Content != "" {
			sb.WriteString("\n")
		}
		args := strings.TrimSpace(tc.Arguments)
		if args == "" {
			args = "{}"
		}
		sb.WriteString("{\"name\": \"" + tc.Name + "\", \"parameters\": " + args + "}")
	}
	return sb.String()
}

const llamaToolsIntro = "You have access to the following functions. To call a function, respond with JSON for a function call, one call per line, in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}. Do not use variables.\n\n"

func llamaTools(tools []Tool) (string, error) {
	var sb strings.Builder
	sb.WriteString(llamaToolsIntro)
	for i, tool := range tools {
		if i > 0 {
			sb.WriteString("\n")
		}
		sb.WriteString("{\"type\": \"function\", \"function\": {\"name\": ")
		pyString(&sb, tool.Name)
		if tool.Description != "" {
			sb.WriteString(", \"description\": ")
			pyString(&sb, tool.Description)
		}
		if len(tool.Parameters) > 0 && !bytes.Equal(bytes.TrimSpace(tool.Parameters), []byte("null")) {
			p, err := pyJSON(tool.Parameters)
			if err != nil {
				return "", fmt.Errorf("chat: tool %q parameters: %w", tool.Name, err)
			}
			sb.WriteString(", \"parameters\": " + p)
		}
		sb.WriteString("}}")
	}
	return sb.String(), nil
}

// Parse implements [Template]. The reply is cut at its first stop id. If
// the reply ends with one or more lines that are JSON objects with a
// "name" (and "parameters" or "arguments"), those are the tool calls and
// the text before them is the content; otherwise it is all content.
func (t *Llama3) Parse(ids []int32) (Message, error) {
	reply := ids
	for i, id := range ids {
		if containsID(t.stops, id) {
			reply = ids[:i]
			break
		}
	}
	text := t.tok.Decode(reply)
	m := Message{Role: RoleAssistant, Content: text}
	// Candidate starts: the beginning and every line start with '{'.
	starts := []int{0}
	for i := 0; i < len(text); i++ {
		if text[i] == '\n' && i+1 < len(text) {
			starts = append(starts, i+1)
		}
	}
	for _, p := range starts {
		if p >= len(text) || text[p] != '{' {
			continue
		}
		calls, ok := parseJSONCalls(text[p:])
		if !ok {
			continue
		}
		m.Content = strings.TrimSuffix(text[:p], "\n")
		for i := range calls {
			calls[i].ID = t.id(ids, i)
		}
		m.ToolCalls = calls
		break
	}
	return m, nil
}

func (t *Llama3) id(reply []int32, i int) string {
	if t.toolCallID != nil {
		return t.toolCallID(reply, i)
	}
	return defaultToolCallID(reply, i)
}

func containsID(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// parseJSONCalls reads s as whitespace-separated JSON objects that are all
// tool calls.
func parseJSONCalls(s string) ([]ToolCall, bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	var calls []ToolCall
	for {
		var v struct {
			Name       *string         `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
			Arguments  json.RawMessage `json:"arguments"`
		}
		if err := dec.Decode(&v); err != nil {
			if errors.Is(err, io.EOF) && len(calls) > 0 {
				return calls, true
			}
			return nil, false
		}
		if v.Name == nil || *v.Name == "" {
			return nil, false
		}
		args := v.Parameters
		if len(args) == 0 {
			args = v.Arguments
		}
		a := string(args)
		switch {
		case len(args) == 0 || a == "null":
			a = "{}"
		case args[0] == '"':
			if json.Unmarshal(args, &a) != nil {
				return nil, false
			}
		}
		calls = append(calls, ToolCall{Name: *v.Name, Arguments: a})
	}
}
