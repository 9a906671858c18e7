package llmapi

import (
	"encoding/json"
)

// Anthropic Messages: requests, content blocks and tools as the gateway
// reads them; answers as it writes them.

// AnthropicBlock is a content block of a Messages request.
type AnthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Thinking  string          `json:"thinking"`
	// CacheControl (prompt caching) is accepted and ignored: the token
	// state is the gateway's own prefix cache.
	CacheControl json.RawMessage `json:"cache_control"`
}

// AnthropicMessage is a message of a Messages request.
type AnthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// OutputConfig (per-turn effort, on Claude Code's system messages) is
	// accepted and ignored.
	OutputConfig json.RawMessage `json:"output_config"`
}

// AnthropicTool is a tool a Messages request declares.
type AnthropicTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	// DeferLoading tools (tool search) are not in the model's context
	// until discovered, as on Anthropic's API: left out of the prompt.
	DeferLoading bool            `json:"defer_loading"`
	CacheControl json.RawMessage `json:"cache_control"`
}

// AnthropicRequest is a Messages request.
type AnthropicRequest struct {
	Model         string             `json:"model"`
	MaxTokens     *int               `json:"max_tokens"`
	System        json.RawMessage    `json:"system"`
	Messages      []AnthropicMessage `json:"messages"`
	Tools         []AnthropicTool    `json:"tools"`
	ToolChoice    json.RawMessage    `json:"tool_choice"`
	Temperature   *float32           `json:"temperature"`
	TopP          *float32           `json:"top_p"`
	TopK          *int               `json:"top_k"`
	StopSequences []string           `json:"stop_sequences"`
	Stream        bool               `json:"stream"`
	MCPServers    json.RawMessage    `json:"mcp_servers"`
	Container     json.RawMessage    `json:"container"`
	// Accepted, recorded in the event's request, not honoured (listed in
	// its ignored field): the model's own template decides whether it
	// thinks; there is no server-side context editing, effort setting or
	// service tier.
	Thinking          json.RawMessage `json:"thinking"`
	ContextManagement json.RawMessage `json:"context_management"`
	OutputConfig      json.RawMessage `json:"output_config"`
	ServiceTier       json.RawMessage `json:"service_tier"`
}

// AnthropicOutBlock is a content block of an answer.
type AnthropicOutBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
}

// AnthropicUsage is the token counts of an answer.
type AnthropicUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// AnthropicResponse is a Messages answer (the message of a stream's
// message_start too).
type AnthropicResponse struct {
	ID           string              `json:"id"`
	Type         string              `json:"type"`
	Role         string              `json:"role"`
	Model        string              `json:"model"`
	Content      []AnthropicOutBlock `json:"content"`
	StopReason   *string             `json:"stop_reason"`
	StopSequence *string             `json:"stop_sequence"`
	Usage        AnthropicUsage      `json:"usage"`
}
