// Package chat is agl's one internal conversation model: messages, tool
// definitions, tool calls and tool results. The gateway translates OpenAI
// Chat Completions, Responses and Anthropic Messages into it and back; chat
// templates render it to token ids and parse generated ids back into it.
package chat

import "encoding/json"

// Roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one turn of a conversation.
type Message struct {
	Role string `json:"role"`
	// Content is the text of the message (for tool messages, the result).
	Content string `json:"content"`
	// Reasoning is optional model "thinking" text of an assistant message.
	Reasoning string `json:"reasoning,omitempty"`
	// ToolCalls are the calls an assistant message makes.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID links a tool message to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool's name on a tool message (optional).
	Name string `json:"name,omitempty"`
}

// ToolCall is one function call made by the assistant.
type ToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Arguments is a JSON object, as text.
	Arguments string `json:"arguments"`
}

// Tool is a function the model may call.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Conversation is what a template renders.
type Conversation struct {
	Messages []Message `json:"messages"`
	Tools    []Tool    `json:"tools,omitempty"`
}

// Template renders conversations to ids and parses generated ids back.
//
// Extension property, which the gateway's token state relies on: for a
// conversation c whose last message is an assistant reply generated as ids g
// after Render(c[:k], true) = p, and any further messages m,
//
//	Render(c[:k] + reply + m, true) == p + g + RenderSuffix(c[:k]+reply+m, k+1)
//
// so a continuing call's prompt never re-tokenizes earlier text. The
// gateway's token state relies only on the right-hand side. Render renders
// from scratch as the model's own chat template does, which may show
// history differently from how it was generated (Qwen3's drops the
// reasoning of replies before the last user query, and shows
// enable_thinking=False's empty think block only on a final reply): there
// the equality does not hold, and a from-scratch render is not the
// continuation, which is why the gateway keeps token state.
type Template interface {
	// Render renders the whole conversation; with addGenerationPrompt it
	// ends with the header that starts an assistant turn.
	Render(c Conversation, addGenerationPrompt bool) ([]int32, error)
	// RenderSuffix renders c.Messages[from:] as they follow a generated
	// assistant reply (which ended with a stop id), plus the generation
	// prompt. c.Messages[from-1] must be that assistant reply.
	RenderSuffix(c Conversation, from int) ([]int32, error)
	// Parse turns generated ids (a stop id at the end is allowed) into an
	// assistant message with text and tool calls.
	Parse(ids []int32) (Message, error)
	// StopIDs are the ids that end an assistant turn.
	StopIDs() []int32
}
