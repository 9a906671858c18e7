// Package api holds agl's wire types: the JSON shapes of the /api routes, of
// the events harnesses and the gateway append, and a Go client for them.
package api

import (
	"encoding/json"
	"fmt"
	"math"
)

// API shapes a model call can arrive in.
const (
	ShapeChatCompletions = "chat.completions"
	ShapeCompletions     = "completions"
	ShapeResponses       = "responses"
	ShapeMessages        = "messages" // Anthropic Messages
)

// ModelCall is the data of a "model_request" event: one call a harness made
// through the gateway, with the exact token ids the engine consumed and
// produced. It is the only input the samples package needs from a call.
type ModelCall struct {
	// CallID is unique within the attempt (e.g. the response id returned
	// to the harness); intermediate rewards may reference it.
	CallID string `json:"call_id"`
	// API is one of the Shape* constants.
	API string `json:"api"`
	// Model is the name the engine served; ModelVersion the weights version
	// that produced every response token of this call.
	Model        string `json:"model"`
	ModelVersion int64  `json:"model_version"`
	// Agent names the agent of a multi-agent harness that made the call
	// (path segment /r/{rollout}/{attempt}/agents/{agent}/, header
	// X-Agl-Agent, or the proxy's model-name mapping); empty for the
	// default agent. See ValidAgentName.
	Agent string `json:"agent,omitempty"`
	// PromptIDs are the exact ids given to the engine; ResponseIDs the exact
	// ids it generated; ResponseLogprobs[i] is log p(ResponseIDs[i]) under
	// the policy (temperature-1 log-softmax), as the trainer computes it.
	PromptIDs        []int32   `json:"prompt_ids,omitempty"`
	ResponseIDs      []int32   `json:"response_ids,omitempty"`
	ResponseLogprobs []float32 `json:"response_logprobs,omitempty"`
	// NoTokenIDs marks a call whose upstream returned no ids (a hosted
	// API): usable for SFT or prompt work, never for RL.
	NoTokenIDs   bool   `json:"no_token_ids,omitempty"`
	FinishReason string `json:"finish_reason,omitempty"`
	// Continued is true when PromptIDs extend the previous call's
	// prompt+response ids of this attempt (token state kept); otherwise
	// RenderReason says why the prompt was rendered from scratch
	// ("first_call", "history_rewritten", "model_version_changed", …).
	Continued    bool   `json:"continued"`
	RenderReason string `json:"render_reason,omitempty"`
	// Sampling holds the effective sampling parameters.
	Sampling json.RawMessage `json:"sampling,omitempty"`
	// Request is the body as received; Response the body as returned
	// (for streams, the assembled final object).
	Request  json.RawMessage `json:"request,omitempty"`
	Response json.RawMessage `json:"response,omitempty"`
	Usage    Usage           `json:"usage"`
	// LatencyMS is the gateway's wall time for the call; Retries counts
	// upstream retries.
	LatencyMS float64 `json:"latency_ms"`
	Retries   int     `json:"retries,omitempty"`
	Stream    bool    `json:"stream,omitempty"`
}

// MaxAgentNameLen bounds an agent name.
const MaxAgentNameLen = 64

// ValidAgentName reports why name cannot name an agent: agent names are 1
// to MaxAgentNameLen bytes of A-Z a-z 0-9 '-' '_' '.', not starting with
// '.' (they appear in URL paths, headers, config keys and file names).
func ValidAgentName(name string) error {
	if name == "" {
		return fmt.Errorf("agent name is empty")
	}
	if len(name) > MaxAgentNameLen {
		return fmt.Errorf("agent name of %d bytes exceeds %d", len(name), MaxAgentNameLen)
	}
	if name[0] == '.' {
		return fmt.Errorf("agent name %q starts with '.'", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("agent name %q: byte %d (%q) is not one of A-Z a-z 0-9 - _ .", name, i, c)
		}
	}
	return nil
}

// Usage counts tokens of one call.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// Reward is the data of a "reward" event. Either Value is set, or Values
// holds several named dimensions of which Primary is the one trained on.
// CallID, when set, makes it an intermediate reward for that call.
type Reward struct {
	Value   *float64           `json:"value,omitempty"`
	Values  map[string]float64 `json:"values,omitempty"`
	Primary string             `json:"primary,omitempty"`
	CallID  string             `json:"call_id,omitempty"`
}

// PrimaryValue returns the reward trained on.
func (r Reward) PrimaryValue() (float64, error) {
	var v float64
	switch {
	case r.Value != nil:
		v = *r.Value
	case len(r.Values) > 0:
		key := r.Primary
		if key == "" && len(r.Values) == 1 {
			for k := range r.Values {
				key = k
			}
		}
		x, ok := r.Values[key]
		if !ok {
			return 0, fmt.Errorf("reward: primary %q not among values", r.Primary)
		}
		v = x
	default:
		return 0, fmt.Errorf("reward: neither value nor values given")
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("reward: value %v is not finite", v)
	}
	return v, nil
}

// ParseReward decodes a reward event's data. A bare JSON number is accepted
// as {"value": n}.
func ParseReward(data json.RawMessage) (Reward, error) {
	var n float64
	if err := json.Unmarshal(data, &n); err == nil {
		return Reward{Value: &n}, nil
	}
	var r Reward
	if err := json.Unmarshal(data, &r); err != nil {
		return Reward{}, fmt.Errorf("reward: %w", err)
	}
	if _, err := r.PrimaryValue(); err != nil {
		return Reward{}, err
	}
	return r, nil
}

// RewardSummary picks the reward that summarises an attempt from the data of
// its reward events, newest first: the newest final (not per-call) reward
// that parses. ok is false when there is none.
func RewardSummary(newestFirst []json.RawMessage) (value float64, data json.RawMessage, ok bool) {
	for _, d := range newestFirst {
		r, err := ParseReward(d)
		if err != nil || r.CallID != "" {
			continue
		}
		v, err := r.PrimaryValue()
		if err == nil {
			return v, d, true
		}
	}
	return 0, nil, false
}
