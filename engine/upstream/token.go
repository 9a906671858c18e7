package upstream

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"

	"github.com/aglrl/agl/engine"
)

// TokenEngine is an engine.TokenEngine over an upstream's /v1/completions
// route with token-id prompts (vLLM), so that agl's own chat template and
// token state drive a scale-out engine: the gateway renders and continues
// prompts as ids, vLLM only generates.
//
// Calls are sticky by the key WithSticky put in the context (the gateway
// gives the rollout id), else by a hash of the prompt's first ids, so the
// calls of one conversation reach the same endpoint and reuse its prefix
// cache. Log-probs are what the upstream reports; configure
// vLLM to report the raw (temperature-1) log-probs the trainer recomputes
// (--logprobs-mode raw_logprobs).
type TokenEngine struct {
	c          *Client
	model      string
	maxContext int
}

// stickyPrefix is how many leading prompt ids pick the endpoint.
const stickyPrefix = 256

// NewTokenEngine serves model (a configured model name, "" for the
// default) of c; maxContext is its context length (0: unknown).
func NewTokenEngine(c *Client, model string, maxContext int) *TokenEngine {
	return &TokenEngine{c: c, model: c.model(model).name, maxContext: maxContext}
}

// ModelName implements engine.TokenEngine.
func (e *TokenEngine) ModelName() string { return e.model }

// Version implements engine.TokenEngine.
func (e *TokenEngine) Version() int64 { return e.c.model(e.model).version.Load() }

// MaxContext implements engine.TokenEngine.
func (e *TokenEngine) MaxContext() int { return e.maxContext }

type stickyKey struct{}

// WithSticky returns ctx carrying the key that picks a TokenEngine call's
// endpoint (the rollout id).
func WithSticky(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, stickyKey{}, key)
}

// Generate implements engine.TokenEngine.
func (e *TokenEngine) Generate(ctx context.Context, prompt []int32, s engine.Sampling) (engine.Result, error) {
	sticky, _ := ctx.Value(stickyKey{}).(string)
	if sticky == "" {
		h := fnv.New64a()
		var buf [4]byte
		for _, id := range prompt[:min(len(prompt), stickyPrefix)] {
			binary.LittleEndian.PutUint32(buf[:], uint32(id))
			h.Write(buf[:])
		}
		var key [8]byte
		binary.LittleEndian.PutUint64(key[:], h.Sum64())
		sticky = string(key[:])
	}
	r, err := e.c.Completion(ctx, CompletionRequest{Model: e.model, Sticky: sticky, PromptIDs: prompt, Sampling: s})
	if err != nil {
		return engine.Result{}, err
	}
	if r.NoTokenIDs {
		return engine.Result{}, fmt.Errorf("upstream %s returned no token ids: it must support return_token_ids", e.model)
	}
	if len(r.Logprobs) != len(r.IDs) {
		return engine.Result{}, fmt.Errorf("upstream %s returned %d log-probs for %d ids", e.model, len(r.Logprobs), len(r.IDs))
	}
	return engine.Result{IDs: r.IDs, Logprobs: r.Logprobs, FinishReason: r.FinishReason, Model: r.Model, ModelVersion: r.Version, Retries: r.Retries}, nil
}
