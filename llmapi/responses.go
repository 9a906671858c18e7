package llmapi

import (
	"encoding/json"
)

// OpenAI Responses: requests, input items and tools as the gateway reads
// them; output items and the response object as it writes them.

// ResponsesItem is an input item of a Responses request (a message, a
// function or custom tool call or its output, reasoning); output items
// come back as input items.
type ResponsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"`
	Output    json.RawMessage `json:"output"`
	// Namespace is set on a call to a function of a namespace tool.
	Namespace string `json:"namespace"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

// ResponsesTool is a tool a Responses request declares.
type ResponsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	// Tools are a namespace tool's functions (Codex's multi_agent_v1).
	Tools []ResponsesTool `json:"tools"`
}

// ResponsesRequest is a Responses request.
type ResponsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Tools              []ResponsesTool `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	Temperature        *float32        `json:"temperature"`
	TopP               *float32        `json:"top_p"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Stream             bool            `json:"stream"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	Background         bool            `json:"background"`
	Text               *struct {
		Format *struct {
			Type string `json:"type"`
		} `json:"format"`
	} `json:"text"`
	// Accepted, recorded, not honoured (the event's ignored field).
	Reasoning      json.RawMessage `json:"reasoning"`
	Include        json.RawMessage `json:"include"`
	ServiceTier    json.RawMessage `json:"service_tier"`
	PromptCacheKey json.RawMessage `json:"prompt_cache_key"`
	Truncation     json.RawMessage `json:"truncation"`
}

// ResponsesPart is an output_text part of an output message.
type ResponsesPart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

// ResponsesSummary is a part of a reasoning item's summary.
type ResponsesSummary struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ResponsesOutItem is an output item of a response.
type ResponsesOutItem struct {
	Type      string             `json:"type"`
	ID        string             `json:"id"`
	Status    string             `json:"status,omitempty"`
	Role      string             `json:"role,omitempty"`
	Content   []ResponsesPart    `json:"content,omitempty"`
	Summary   []ResponsesSummary `json:"summary,omitempty"`
	CallID    string             `json:"call_id,omitempty"`
	Name      string             `json:"name,omitempty"`
	Arguments *string            `json:"arguments,omitempty"`
	Input     *string            `json:"input,omitempty"`
	Namespace string             `json:"namespace,omitempty"`
}

// MarshalJSON keeps the arrays a type requires even when empty.
func (it ResponsesOutItem) MarshalJSON() ([]byte, error) {
	type plain ResponsesOutItem
	switch it.Type {
	case "message":
		if it.Content == nil {
			return json.Marshal(struct {
				plain
				Content []ResponsesPart `json:"content"`
			}{plain(it), []ResponsesPart{}})
		}
	case "reasoning":
		if it.Summary == nil {
			return json.Marshal(struct {
				plain
				Summary []ResponsesSummary `json:"summary"`
			}{plain(it), []ResponsesSummary{}})
		}
	}
	return json.Marshal(plain(it))
}

// ResponsesUsage is the token counts of a response.
type ResponsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// ResponsesResponse is a response object (an answer, or a stream event's
// response).
type ResponsesResponse struct {
	ID                string    `json:"id"`
	Object            string    `json:"object"`
	CreatedAt         int64     `json:"created_at"`
	Status            string    `json:"status"`
	Error             *struct{} `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Model             string             `json:"model"`
	Output            []ResponsesOutItem `json:"output"`
	ParallelToolCalls bool               `json:"parallel_tool_calls"`
	ToolChoice        string             `json:"tool_choice"`
	Tools             []any              `json:"tools"`
	Temperature       float32            `json:"temperature"`
	TopP              float32            `json:"top_p"`
	Usage             *ResponsesUsage    `json:"usage"`
}
