package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/aglrl/agl/tokenizer"
)

// Special token strings of the ChatML format.
const (
	TokIMStart      = "<|im_start|>"
	TokIMEnd        = "<|im_end|>"
	TokEndOfText    = "<|endoftext|>"
	TokToolCall     = "<tool_call>"
	TokToolCallEnd  = "</tool_call>"
	TokThink        = "<think>"
	TokThinkEnd     = "</think>"
	tokToolResp     = "<tool_response>"
	tokToolRespEnd  = "</tool_response>"
	emptyThinkBlock = "<think>\n\n</think>\n\n"
)

// ChatMLOptions configure [NewChatML].
type ChatMLOptions struct {
	// CompactTools renders tool definitions one line per tool,
	// "name(arg: type, opt?: type) - description", for small models,
	// instead of Qwen's JSON schemas inside <tools></tools>, and leaves out
	// the instructions on the call format (a model trained from scratch
	// learns it from demonstrations; those ~70 tokens were a fifth of a
	// calc example's sequence). Tool calls and tool results look the same
	// in both.
	CompactTools bool
	// DisableThinking is Qwen3's enable_thinking=false: the generation
	// prompt ends with an empty "<think>\n\n</think>\n\n" block, and
	// assistant messages without reasoning are rendered with that block
	// too (so that the extension property holds).
	DisableThinking bool
	// ToolCallID names the i-th tool call parsed from reply. The default
	// is deterministic: "call_" + 16 hex digits of the FNV-1a hash of the
	// reply ids + "_" + i. A gateway wanting globally unique ids can pass
	// a counter or random source here.
	ToolCallID func(reply []int32, i int) string
}

// ChatML is the ChatML / Qwen (Hermes tool calling) chat template:
//
//	<|im_start|>system\n{system}\n\n# Tools ...<tools>...</tools>...<|im_end|>\n
//	<|im_start|>user\n{text}<|im_end|>\n
//	<|im_start|>assistant\n{reasoning block}{text}\n<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call><|im_end|>\n
//	<|im_start|>user\n<tool_response>\n{result}\n</tool_response>\n<tool_response>\n...\n</tool_response><|im_end|>\n
//	<|im_start|>assistant\n
//
// It follows Qwen3's Jinja template with two deliberate differences, both
// needed for the extension property: an assistant message's reasoning is
// always rendered (Qwen drops it for turns before the last user query),
// and the generation prompt "<|im_start|>assistant\n" is tokenized apart
// from the reply that follows it (tokenizing the whole string at once can
// merge the header's "\n" with a reply that starts with whitespace).
//
// The tokenizer must have <|im_start|> and <|im_end|> as added tokens;
// <tool_call> and the others may be added tokens or plain text.
type ChatML struct {
	tok   tokenizer.Tokenizer
	opts  ChatMLOptions
	imEnd int32
	stops []int32
}

var _ Template = (*ChatML)(nil)

// NewChatML returns the ChatML template over tok.
func NewChatML(tok tokenizer.Tokenizer, opts ChatMLOptions) (*ChatML, error) {
	if tok == nil {
		return nil, fmt.Errorf("chat: nil tokenizer")
	}
	if _, ok := tok.TokenID(TokIMStart); !ok {
		return nil, fmt.Errorf("chat: tokenizer has no %s token; ChatML needs it", TokIMStart)
	}
	end, ok := tok.TokenID(TokIMEnd)
	if !ok {
		return nil, fmt.Errorf("chat: tokenizer has no %s token; ChatML needs it", TokIMEnd)
	}
	t := &ChatML{tok: tok, opts: opts, imEnd: end, stops: []int32{end}}
	if eot, ok := tok.TokenID(TokEndOfText); ok {
		t.stops = append(t.stops, eot)
	}
	return t, nil
}

// WithToolCallID returns a copy of t whose Parse names tool calls with f
// (see ChatMLOptions.ToolCallID); nil restores the default.
func (t *ChatML) WithToolCallID(f func(reply []int32, i int) string) *ChatML {
	c := *t
	c.opts.ToolCallID = f
	return &c
}

// Tokenizer returns the template's tokenizer.
func (t *ChatML) Tokenizer() tokenizer.Tokenizer { return t.tok }

// StopIDs implements [Template]: <|im_end|> first, then <|endoftext|>
// where the tokenizer has it. The extension property assumes the reply
// ended with <|im_end|> (EndOfTurnID); a reply cut by <|endoftext|> or by
// max tokens does not end its turn, and the gateway must re-render.
func (t *ChatML) StopIDs() []int32 { return append([]int32(nil), t.stops...) }

// EndOfTurnID is the id of <|im_end|>.
func (t *ChatML) EndOfTurnID() int32 { return t.imEnd }

// Render implements [Template].
func (t *ChatML) Render(c Conversation, addGenerationPrompt bool) ([]int32, error) {
	r := t.newRenderer(false)
	if err := t.render(r, c, addGenerationPrompt); err != nil {
		return nil, err
	}
	return r.ids, nil
}

// RenderMasked renders c like Render(c, false) and also returns a mask
// that is true for the tokens the model produces: each assistant
// message's reply (reasoning, text, tool calls) and its closing
// <|im_end|>. It is what supervised training puts the loss on.
func (t *ChatML) RenderMasked(c Conversation) (ids []int32, mask []bool, err error) {
	r := t.newRenderer(true)
	if err := t.render(r, c, false); err != nil {
		return nil, nil, err
	}
	return r.ids, r.mask, nil
}

func (t *ChatML) render(r *renderer, c Conversation, gen bool) error {
	if err := validateCommon(c); err != nil {
		return err
	}
	from := 0
	ms := c.Messages
	hasSystem := len(ms) > 0 && ms[0].Role == RoleSystem
	switch {
	case len(c.Tools) > 0:
		r.text(TokIMStart + "system\n")
		if hasSystem {
			r.text(ms[0].Content + "\n\n")
		}
		tools, err := t.renderTools(c.Tools)
		if err != nil {
			return err
		}
		r.text(tools + TokIMEnd + "\n")
	case hasSystem:
		r.text(TokIMStart + "system\n" + ms[0].Content + TokIMEnd + "\n")
	}
	if hasSystem {
		from = 1
	}
	lq := -1 // agl's compact variant renders every reply as generated
	if !t.opts.CompactTools {
		lq = lastQuery(ms)
	}
	t.messages(r, ms, from, lq)
	if gen {
		r.text(t.generationPrompt())
	}
	r.cut(false)
	return nil
}

// RenderSuffix implements [Template].
func (t *ChatML) RenderSuffix(c Conversation, from int) ([]int32, error) {
	if from < 1 || from > len(c.Messages) {
		return nil, fmt.Errorf("chat: RenderSuffix from %d out of range [1, %d]", from, len(c.Messages))
	}
	if role := c.Messages[from-1].Role; role != RoleAssistant {
		return nil, fmt.Errorf("chat: RenderSuffix: message %d is %q, want the assistant reply", from-1, role)
	}
	if err := validateCommon(c); err != nil {
		return nil, err
	}
	r := t.newRenderer(false)
	r.text("\n")
	t.messages(r, c.Messages, from, -1)
	r.text(t.generationPrompt())
	r.cut(false)
	return r.ids, nil
}

func (t *ChatML) generationPrompt() string {
	if t.opts.DisableThinking {
		return TokIMStart + "assistant\n" + emptyThinkBlock
	}
	return TokIMStart + "assistant\n"
}

// lastQuery is Qwen3's template's last_query_index: the index of the last
// user message that is not a wrapped tool response (<tool_response>…
// </tool_response>), len(ms)-1 when there is none.
func lastQuery(ms []Message) int {
	for i := len(ms) - 1; i >= 0; i-- {
		m := &ms[i]
		if m.Role == RoleUser && !(strings.HasPrefix(m.Content, tokToolResp) && strings.HasSuffix(m.Content, tokToolRespEnd)) {
			return i
		}
	}
	return len(ms) - 1
}

// messages renders ms[from:]. ms[from-1] (if any) decides tool grouping.
//
// With lq >= 0 (a render from scratch) assistant messages are rendered as
// Qwen3's own Jinja template does, lq being its last_query_index: a
// reply's reasoning (or a <think> block inline in its content) is shown
// only after the last user query, and there also as an empty think block
// on a conversation's final reply. With lq < 0 (a continuation of
// generated ids, RenderSuffix, and the compact variant) every reply is
// rendered as generated: its reasoning when it has some, and with
// DisableThinking the empty think block the generation prompt gave it.
func (t *ChatML) messages(r *renderer, ms []Message, from, lq int) {
	for i := from; i < len(ms); i++ {
		m := ms[i]
		switch m.Role {
		case RoleUser, RoleSystem:
			r.text(TokIMStart + m.Role + "\n" + m.Content + TokIMEnd + "\n")
		case RoleAssistant:
			r.text(TokIMStart + "assistant\n")
			reasoning, content := m.Reasoning, m.Content
			show := reasoning != ""
			if lq >= 0 {
				if reasoning == "" && strings.Contains(content, TokThinkEnd) {
					parts := strings.Split(content, TokThinkEnd)
					content = strings.TrimLeft(parts[len(parts)-1], "\n")
					before := strings.Split(strings.TrimRight(parts[0], "\n"), TokThink)
					reasoning = strings.TrimLeft(before[len(before)-1], "\n")
				}
				show = i > lq && (i == len(ms)-1 || reasoning != "")
				if show && reasoning == "" && t.opts.DisableThinking {
					// The generation prompt gave the empty think block.
					r.text(emptyThinkBlock)
					show = false
				}
			} else if t.opts.DisableThinking {
				r.text(emptyThinkBlock)
			}
			r.cut(false)
			r.text(replyBody(reasoning, show, content, m.ToolCalls) + TokIMEnd)
			r.cut(true)
			r.text("\n")
		case RoleTool:
			if i == 0 || ms[i-1].Role != RoleTool {
				r.text(TokIMStart + "user")
			}
			r.text("\n" + tokToolResp + "\n" + m.Content + "\n" + tokToolRespEnd)
			if i == len(ms)-1 || ms[i+1].Role != RoleTool {
				r.text(TokIMEnd + "\n")
			}
		}
	}
}

// ReplyIDs are the ids a model generates for the reply m after the
// generation prompt: its think block when it has reasoning, its text and
// tool calls, then <|im_end|> (what RenderSuffix continues from; Parse
// turns them back into m).
func (t *ChatML) ReplyIDs(m Message) []int32 {
	return append(t.tok.Encode(t.replyText(m)), t.imEnd)
}

// replyText is what the model generates for m, without <|im_end|> (and,
// with DisableThinking, without the empty think block of the prompt).
func (t *ChatML) replyText(m Message) string {
	return replyBody(m.Reasoning, m.Reasoning != "", m.Content, m.ToolCalls)
}

// replyBody renders a reply as Qwen3's template does: with think, the
// think block and the content without leading newlines; then the tool
// calls, the first one on a new line when the content (as given) is not
// empty.
func replyBody(reasoning string, think bool, content string, calls []ToolCall) string {
	var sb strings.Builder
	if think {
		sb.WriteString(TokThink + "\n" + strings.Trim(reasoning, "\n") + "\n" + TokThinkEnd + "\n\n")
		sb.WriteString(strings.TrimLeft(content, "\n"))
	} else {
		sb.WriteString(content)
	}
	for i, tc := range calls {
		if i > 0 || content != "" {
			sb.WriteString("\n")
		}
		args := strings.TrimSpace(tc.Arguments)
		if args == "" {
			args = "{}"
		}
		sb.WriteString(TokToolCall + "\n{\"name\": \"" + tc.Name + "\", \"arguments\": " + args + "}\n" + TokToolCallEnd)
	}
	return sb.String()
}

// validateCommon checks c for shapes no template can render: unknown
// roles, tool results that answer no tool call, tool calls with invalid
// names or arguments, invalid tool definitions.
func validateCommon(c Conversation) error {
	for i, tool := range c.Tools {
		if !validName(tool.Name) {
			return fmt.Errorf("chat: tool %d: invalid name %q", i, tool.Name)
		}
		if len(tool.Parameters) > 0 && !json.Valid(tool.Parameters) {
			return fmt.Errorf("chat: tool %q: parameters are not valid JSON", tool.Name)
		}
	}
	ms := c.Messages
	for i := 0; i < len(ms); i++ {
		m := ms[i]
		switch m.Role {
		case RoleSystem, RoleUser:
			if len(m.ToolCalls) > 0 || m.ToolCallID != "" {
				return fmt.Errorf("chat: message %d: a %s message cannot carry tool calls or a tool_call_id", i, m.Role)
			}
		case RoleAssistant:
			if m.ToolCallID != "" {
				return fmt.Errorf("chat: message %d: an assistant message cannot carry a tool_call_id", i)
			}
			for j, tc := range m.ToolCalls {
				if !validName(tc.Name) {
					return fmt.Errorf("chat: message %d tool call %d: invalid tool name %q", i, j, tc.Name)
				}
				if a := strings.TrimSpace(tc.Arguments); a != "" && !json.Valid([]byte(a)) {
					return fmt.Errorf("chat: message %d tool call %d (%s): arguments are not valid JSON: %q", i, j, tc.Name, truncate(a, 80))
				}
			}
		case RoleTool:
			// Find the assistant message this tool result answers.
			k := i - 1
			for k >= 0 && ms[k].Role == RoleTool {
				k--
			}
			if k < 0 || ms[k].Role != RoleAssistant || len(ms[k].ToolCalls) == 0 {
				return fmt.Errorf("chat: message %d: tool message does not follow an assistant message with tool calls", i)
			}
			if len(ms[k].ToolCalls) > 0 && i-k > len(ms[k].ToolCalls) {
				return fmt.Errorf("chat: message %d: more tool results than the %d tool calls of message %d", i, len(ms[k].ToolCalls), k)
			}
			if m.ToolCallID != "" && hasIDs(ms[k].ToolCalls) && !hasID(ms[k].ToolCalls, m.ToolCallID) {
				return fmt.Errorf("chat: message %d: tool_call_id %q matches no tool call of message %d", i, m.ToolCallID, k)
			}
		case "":
			return fmt.Errorf("chat: message %d has no role", i)
		default:
			return fmt.Errorf("chat: message %d: unknown role %q (want system, user, assistant or tool)", i, m.Role)
		}
	}
	return nil
}

func hasIDs(tcs []ToolCall) bool {
	for _, tc := range tcs {
		if tc.ID != "" {
			return true
		}
	}
	return false
}

func hasID(tcs []ToolCall, id string) bool {
	for _, tc := range tcs {
		if tc.ID == id {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

const qwenToolsIntro = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>"

const qwenToolsOutro = "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"

func (t *ChatML) renderTools(tools []Tool) (string, error) {
	var sb strings.Builder
	if t.opts.CompactTools {
		sb.WriteString("# Tools")
		for _, tool := range tools {
			line, err := compactTool(tool)
			if err != nil {
				return "", err
			}
			sb.WriteString("\n" + line)
		}
		return sb.String(), nil
	}
	sb.WriteString(qwenToolsIntro)
	for _, tool := range tools {
		// {"type": "function", "function": {"name", "description", "parameters"}}
		sb.WriteString("\n{\"type\": \"function\", \"function\": {\"name\": ")
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
	sb.WriteString(qwenToolsOutro)
	return sb.String(), nil
}

// compactTool renders "name(a: string, b?: integer) - description".
func compactTool(tool Tool) (string, error) {
	var sb strings.Builder
	sb.WriteString(tool.Name + "(")
	if len(tool.Parameters) > 0 && !bytes.Equal(bytes.TrimSpace(tool.Parameters), []byte("null")) {
		var schema struct {
			Properties json.RawMessage `json:"properties"`
			Required   []string        `json:"required"`
		}
		if err := json.Unmarshal(tool.Parameters, &schema); err != nil {
			return "", fmt.Errorf("chat: tool %q parameters: %w", tool.Name, err)
		}
		if len(schema.Properties) > 0 && !bytes.Equal(schema.Properties, []byte("null")) {
			props, err := objectMembers(schema.Properties)
			if err != nil {
				return "", fmt.Errorf("chat: tool %q properties: %w", tool.Name, err)
			}
			for i, p := range props {
				if i > 0 {
					sb.WriteString(", ")
				}
				sb.WriteString(p.Key)
				required := false
				for _, r := range schema.Required {
					if r == p.Key {
						required = true
					}
				}
				if !required {
					sb.WriteString("?")
				}
				sb.WriteString(": " + compactType(p.Value))
			}
		}
	}
	sb.WriteString(")")
	if d := strings.Join(strings.Fields(tool.Description), " "); d != "" {
		sb.WriteString(" - " + d)
	}
	return sb.String(), nil
}

// compactType names a JSON schema type briefly: string, integer, "a"|"b",
// string[], object, any.
func compactType(raw json.RawMessage) string {
	var s struct {
		Type  json.RawMessage   `json:"type"`
		Enum  []json.RawMessage `json:"enum"`
		Items json.RawMessage   `json:"items"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return "any"
	}
	if len(s.Enum) > 0 {
		parts := make([]string, len(s.Enum))
		for i, e := range s.Enum {
			p, err := pyJSON(e)
			if err != nil {
				return "any"
			}
			parts[i] = p
		}
		return strings.Join(parts, "|")
	}
	var name string
	var names []string
	switch {
	case json.Unmarshal(s.Type, &name) == nil && name != "":
	case json.Unmarshal(s.Type, &names) == nil && len(names) > 0:
		name = strings.Join(names, "|")
	default:
		return "any"
	}
	if name == "array" && len(s.Items) > 0 {
		return compactType(s.Items) + "[]"
	}
	return name
}

// Parse implements [Template]. The reply is cut at its first stop id.
// Reasoning is split off as Qwen3's template does ("<think>...</think>");
// each well-formed "<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>"
// becomes a ToolCall (ids from ChatMLOptions.ToolCallID). A block whose
// JSON does not parse, lacks a name, or is not closed stays in Content as
// text. Text between tool calls other than whitespace is kept in Content.
func (t *ChatML) Parse(ids []int32) (Message, error) {
	reply := ids
	for i, id := range ids {
		if t.isStop(id) {
			reply = ids[:i]
			break
		}
	}
	text := t.tok.Decode(reply)
	m := Message{Role: RoleAssistant}
	if strings.Contains(text, TokThinkEnd) {
		parts := strings.Split(text, TokThinkEnd)
		before := strings.TrimRight(parts[0], "\n")
		if k := strings.LastIndex(before, TokThink); k >= 0 {
			before = before[k+len(TokThink):]
		}
		m.Reasoning = strings.TrimLeft(before, "\n")
		text = strings.TrimLeft(parts[len(parts)-1], "\n")
	}
	var content, pending strings.Builder
	n := 0
	for {
		start := strings.Index(text, TokToolCall)
		if start < 0 {
			break
		}
		tc, used, ok := parseToolCall(text[start+len(TokToolCall):])
		if !ok {
			// Not a tool call: keep the block, up to its closing tag, as text.
			endRel := strings.Index(text[start:], TokToolCallEnd)
			if endRel < 0 {
				break
			}
			end := start + endRel + len(TokToolCallEnd)
			pending.WriteString(text[:end])
			text = text[end:]
			continue
		}
		end := start + len(TokToolCall) + used
		pending.WriteString(text[:start])
		seg := pending.String()
		pending.Reset()
		if n == 0 {
			content.WriteString(strings.TrimSuffix(seg, "\n"))
		} else if strings.TrimSpace(seg) != "" {
			content.WriteString(seg)
		}
		tc.ID = t.toolCallID(ids, n)
		n++
		m.ToolCalls = append(m.ToolCalls, tc)
		text = text[end:]
	}
	pending.WriteString(text)
	if rest := pending.String(); n == 0 || strings.TrimSpace(rest) != "" {
		content.WriteString(rest)
	}
	m.Content = content.String()
	return m, nil
}

func (t *ChatML) isStop(id int32) bool {
	for _, s := range t.stops {
		if s == id {
			return true
		}
	}
	return false
}

func (t *ChatML) toolCallID(reply []int32, i int) string {
	if t.opts.ToolCallID != nil {
		return t.opts.ToolCallID(reply, i)
	}
	return defaultToolCallID(reply, i)
}

// defaultToolCallID is "call_" + the FNV-1a hash of the reply ids + "_" + i.
func defaultToolCallID(reply []int32, i int) string {
	h := fnv.New64a()
	var b [4]byte
	for _, id := range reply {
		b[0], b[1], b[2], b[3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
		h.Write(b[:])
	}
	return fmt.Sprintf("call_%016x_%d", h.Sum64(), i)
}

// parseToolCall reads `{"name": ..., "arguments": ...}</tool_call>` from
// the start of s (whitespace around the JSON allowed) and returns the call
// and the bytes used, closing tag included. The closing tag is found after
// the JSON value, so arguments may contain "</tool_call>" in a string.
// Arguments keep their text as generated; a JSON string holding the
// arguments is unquoted; missing arguments become "{}".
func parseToolCall(s string) (tc ToolCall, used int, ok bool) {
	var v struct {
		Name      *string         `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(&v); err != nil {
		return ToolCall{}, 0, false
	}
	off := int(dec.InputOffset())
	rest := strings.TrimLeft(s[off:], " \t\r\n")
	if !strings.HasPrefix(rest, TokToolCallEnd) {
		return ToolCall{}, 0, false
	}
	used = len(s) - len(rest) + len(TokToolCallEnd)
	if v.Name == nil || *v.Name == "" {
		return ToolCall{}, 0, false
	}
	args := string(v.Arguments)
	switch {
	case len(v.Arguments) == 0 || args == "null":
		args = "{}"
	case v.Arguments[0] == '"':
		var a string
		if json.Unmarshal(v.Arguments, &a) != nil {
			return ToolCall{}, 0, false
		}
		args = a
	}
	return ToolCall{Name: *v.Name, Arguments: args}, used, true
}

// renderer accumulates template text and tokenizes it in chunks: a cut
// tokenizes what was written since the previous cut. Chunks are cut where
// generated ids meet template text (after a generation prompt), so the
// ids of a rendered reply are exactly what a model generating it emits.
type renderer struct {
	tok  tokenizer.Tokenizer
	sb   strings.Builder
	ids  []int32
	mask []bool
	// masking records mask.
	masking bool
}

func (t *ChatML) newRenderer(masking bool) *renderer {
	return &renderer{tok: t.tok, masking: masking}
}

func (r *renderer) text(s string) { r.sb.WriteString(s) }

func (r *renderer) cut(trained bool) {
	if r.sb.Len() == 0 {
		return
	}
	ids := r.tok.Encode(r.sb.String())
	r.sb.Reset()
	r.ids = append(r.ids, ids...)
	if r.masking {
		for range ids {
			r.mask = append(r.mask, trained)
		}
	}
}
