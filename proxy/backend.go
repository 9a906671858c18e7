package proxy

import (
	"context"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
)

// Backend is what answers model calls once the proxy has translated them
// into agl's conversation model. TokenBackend (an engine.TokenEngine plus a
// chat template) and UpstreamBackend (an OpenAI-compatible vLLM/SGLang
// server) implement it.
type Backend interface {
	// Chat generates the assistant's reply to a conversation.
	Chat(ctx context.Context, req *ChatRequest) (*Result, error)
	// Complete continues a raw prompt (text or token ids) without a template.
	Complete(ctx context.Context, req *CompleteRequest) (*Result, error)
	// ModelName is the model served by default.
	ModelName() string
}

// Target names the attempt a call belongs to and the agent that made it
// (token state is keyed by attempt and agent: two agents of one rollout
// have separate conversations; sticky upstream routing by rollout).
type Target struct {
	RolloutID, AttemptID string
	// Agent is "" for the default agent.
	Agent string
}

func (t Target) key() string {
	if t.Agent == "" {
		return t.RolloutID + "/" + t.AttemptID
	}
	// '/' cannot occur in an agent name: no collision with another key.
	return t.RolloutID + "/" + t.AttemptID + "/" + t.Agent
}

// attempt returns t without its agent (what authorization is keyed by).
func (t Target) attempt() Target { return Target{RolloutID: t.RolloutID, AttemptID: t.AttemptID} }

// ChatRequest is one conversation turn to generate.
type ChatRequest struct {
	Target Target
	// Model is the model name asked for after mode overrides ("" = default).
	Model    string
	Conv     chat.Conversation
	Sampling engine.Sampling
	// Stop holds stop strings (backends that cannot honour them return
	// ErrUnsupported).
	Stop []string
	// ToolIDPrefix prefixes generated tool call ids ("call_", "toolu_").
	ToolIDPrefix string
}

// CompleteRequest is a raw completion: exactly one of Prompt or PromptIDs.
type CompleteRequest struct {
	Target    Target
	Model     string
	Prompt    string
	PromptIDs []int32
	// IDsGiven is true when the prompt came as token ids.
	IDsGiven bool
	Sampling engine.Sampling
	Stop     []string
}

// Result is one generation, with everything the model_request event records.
type Result struct {
	// Message is the parsed assistant reply (Chat); Text the decoded
	// completion (Complete).
	Message chat.Message
	Text    string
	// Raw, when set, is the upstream's own answer to the same API the
	// caller called (chat-mode UpstreamBackend), which a call marked
	// WithVerbatim gets as is instead of agl's encoding of Result.
	Raw []byte

	PromptIDs []int32
	// PromptIDsJSON, when set, holds the prompt ids instead of PromptIDs,
	// as a JSON array written as encoding/json writes an []int32 (an
	// upstream's own bytes, which the event takes as they are).
	PromptIDsJSON []byte
	ResponseIDs   []int32
	Logprobs      []float32
	NoTokenIDs    bool
	// FinishReason is engine.FinishStop or engine.FinishLength; API layers
	// map it (and tool calls) to their own vocabulary.
	FinishReason string
	Model        string
	ModelVersion int64

	Continued    bool
	RenderReason string
	// UpstreamRendered: the upstream rendered the prompt (chat mode).
	UpstreamRendered bool
	Retries          int
	// Sampling, if set, is what the engine was actually given (stop ids,
	// max tokens clamped to the context); else the request's is recorded.
	Sampling *engine.Sampling

	PromptTokens, CompletionTokens int
}

// ModelName is the name of the model the proxy's backend serves.
func (p *Proxy) ModelName() string { return p.backend.ModelName() }
