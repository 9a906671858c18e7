package llmapi

import (
	"bytes"
	"encoding/json"
)

// IsSet reports whether a JSON member holds a value: neither absent nor
// null.
func IsSet(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// CompactJSON is raw without insignificant space: "{}" when raw is empty,
// raw as it is when it is not JSON.
func CompactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// OpenAI Chat Completions and Completions: requests as the gateway reads
// them, answers and stream chunks as it writes them.

// ChatToolCall is a tool call of an assistant message (index: a stream
// delta's).
type ChatToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// ChatMessage is a message of a Chat Completions request.
type ChatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Name             string          `json:"name"`
	ToolCalls        []ChatToolCall  `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
	ReasoningContent string          `json:"reasoning_content"`
	FunctionCall     json.RawMessage `json:"function_call"`
	Audio            json.RawMessage `json:"audio"`

	// text is Content decoded, when isText (the fast decoder read it as
	// a string).
	text   string
	isText bool
}

// ContentString is Content decoded when DecodeChatFast read it as a JSON
// string; ok is false otherwise (then Content is to be read).
func (m *ChatMessage) ContentString() (text string, ok bool) { return m.text, m.isText }

// ChatTool is a tool a Chat Completions request declares.
type ChatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// ChatRequest is a Chat Completions request.
type ChatRequest struct {
	Model               string          `json:"model"`
	Messages            []ChatMessage   `json:"messages"`
	Tools               []ChatTool      `json:"tools"`
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

// ChatUsage is the token counts of a Chat Completions or Completions
// answer.
type ChatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// ChatDelta is the delta of a Chat Completions stream chunk.
type ChatDelta struct {
	Role             string         `json:"role,omitempty"`
	Content          *string        `json:"content,omitempty"`
	ReasoningContent string         `json:"reasoning_content,omitempty"`
	ToolCalls        []ChatToolCall `json:"tool_calls,omitempty"`
}

// ChatReply is a non-streamed message: content is null, not absent,
// when there is none (as OpenAI answers; harnesses read it unguarded).
type ChatReply struct {
	Role             string         `json:"role"`
	Content          *string        `json:"content"`
	ReasoningContent string         `json:"reasoning_content,omitempty"`
	ToolCalls        []ChatToolCall `json:"tool_calls,omitempty"`
}

// ChatChoice is a choice of an answer or stream chunk: a message, a delta
// or a completion's text.
type ChatChoice struct {
	Index        int        `json:"index"`
	Message      *ChatReply `json:"message,omitempty"`
	Delta        *ChatDelta `json:"delta,omitempty"`
	Text         *string    `json:"text,omitempty"`
	Logprobs     *struct{}  `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

// ChatResponse is a Chat Completions or Completions answer or stream
// chunk.
type ChatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *ChatUsage   `json:"usage,omitempty"`
}

// CompletionRequest is a Completions request.
type CompletionRequest struct {
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
