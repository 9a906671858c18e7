// Package engine defines what generates tokens for the gateway. A
// TokenEngine is token-in-token-out: the embedded model implements it, and so
// can any upstream that takes token-id prompts.
package engine

import (
	"context"
	"errors"
)

// ErrInvalidPrompt is returned (wrapped) by Generate for a prompt the
// engine cannot take: token ids outside its vocabulary, an empty prompt or
// one that fills its context. Callers answer it as the caller's mistake
// (400), not the engine's.
var ErrInvalidPrompt = errors.New("invalid prompt")

// Sampling controls one generation.
type Sampling struct {
	// Temperature 0 means greedy.
	Temperature float32 `json:"temperature"`
	// TopP in (0,1]; 0 or 1 disables nucleus sampling.
	TopP float32 `json:"top_p,omitempty"`
	// TopK > 0 keeps only the k most likely tokens.
	TopK int `json:"top_k,omitempty"`
	// MaxTokens bounds the response length (> 0).
	MaxTokens int `json:"max_tokens"`
	// StopIDs end generation; the stop id is included in the response.
	StopIDs []int32 `json:"stop_ids,omitempty"`
	// Seed makes sampling deterministic for the same prompt and weights.
	Seed uint64 `json:"seed,omitempty"`
}

// Finish reasons.
const (
	FinishStop   = "stop"   // a stop id was produced
	FinishLength = "length" // MaxTokens or the context limit was reached
)

// Result is one generation.
type Result struct {
	// IDs are the generated ids, including a final stop id.
	IDs []int32
	// Logprobs[i] is log p(IDs[i]) under the temperature-1 distribution of
	// the model that produced it (what the trainer recomputes).
	Logprobs     []float32
	FinishReason string
	// Model and ModelVersion name the weights that produced every id.
	Model        string
	ModelVersion int64
	// Retries counts retried tries of a remote engine (upstream.TokenEngine).
	Retries int
}

// TokenEngine generates from token-id prompts. Implementations batch
// concurrent calls; Generate blocks until done or ctx ends.
type TokenEngine interface {
	Generate(ctx context.Context, prompt []int32, s Sampling) (Result, error)
	// ModelName is the served model's name; Version its current version.
	ModelName() string
	Version() int64
	// MaxContext is the longest prompt+response the engine accepts.
	MaxContext() int
}
