package tinker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/aglrl/agl/engine"
)

// Engine is an engine.TokenEngine that generates through the service's
// `sample` from the sampler its policy published last: the gateway's
// token ids go in, tokens and their log-probs come back.
type Engine struct {
	c          *Client
	sess       *Session
	name       string
	maxContext int

	mu      sync.RWMutex
	path    string
	version int64
}

func (e *Engine) serve(path string, version int64) {
	e.mu.Lock()
	e.path, e.version = path, version
	e.mu.Unlock()
}

// ModelName implements engine.TokenEngine.
func (e *Engine) ModelName() string { return e.name }

// Version implements engine.TokenEngine.
func (e *Engine) Version() int64 {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.version
}

// MaxContext implements engine.TokenEngine.
func (e *Engine) MaxContext() int { return e.maxContext }

// sampleRequest is the SDK's SampleRequest as model_dump(exclude_none)
// writes it.
type sampleRequest struct {
	NumSamples         int            `json:"num_samples"`
	Prompt             modelInput     `json:"prompt"`
	SamplingParams     samplingParams `json:"sampling_params"`
	ModelPath          string         `json:"model_path"`
	TopkPromptLogprobs int            `json:"topk_prompt_logprobs"`
	Type               string         `json:"type"`
}

type modelInput struct {
	Chunks []textChunk `json:"chunks"`
}

type textChunk struct {
	Tokens []int32 `json:"tokens"`
	Type   string  `json:"type"`
}

type samplingParams struct {
	MaxTokens   int     `json:"max_tokens"`
	Seed        *uint64 `json:"seed,omitempty"`
	Stop        []int32 `json:"stop,omitempty"`
	Temperature float32 `json:"temperature"`
	TopK        int     `json:"top_k"`
	TopP        float32 `json:"top_p"`
}

// Generate implements engine.TokenEngine through /api/v1/asample.
func (e *Engine) Generate(ctx context.Context, prompt []int32, s engine.Sampling) (engine.Result, error) {
	if err := e.sess.Err(); err != nil {
		return engine.Result{}, err
	}
	if len(prompt) == 0 {
		return engine.Result{}, fmt.Errorf("tinker: %w: empty prompt", engine.ErrInvalidPrompt)
	}
	if e.maxContext > 0 && len(prompt) >= e.maxContext {
		return engine.Result{}, fmt.Errorf("tinker: %w: %d prompt tokens fill the %d-token context", engine.ErrInvalidPrompt, len(prompt), e.maxContext)
	}
	if s.MaxTokens <= 0 {
		return engine.Result{}, errors.New("tinker: max_tokens must be > 0")
	}
	e.mu.RLock()
	path, version := e.path, e.version
	e.mu.RUnlock()
	sp := samplingParams{MaxTokens: s.MaxTokens, Stop: s.StopIDs, Temperature: s.Temperature, TopK: -1, TopP: 1}
	if s.TopK > 0 {
		sp.TopK = s.TopK
	}
	if s.TopP > 0 && s.TopP < 1 {
		sp.TopP = s.TopP
	}
	if s.Seed != 0 {
		seed := s.Seed
		sp.Seed = &seed
	}
	const endpoint = "/api/v1/asample"
	id, err := e.c.submitJSON(ctx, endpoint, sampleRequest{NumSamples: 1, Type: "sample", ModelPath: path,
		Prompt: modelInput{Chunks: []textChunk{{Tokens: prompt, Type: "encoded_text"}}}, SamplingParams: sp})
	if err != nil {
		return engine.Result{}, err
	}
	r, err := e.c.retrieve(ctx, endpoint, id, true)
	if err != nil {
		return engine.Result{}, err
	}
	out, err := UnmarshalSampleResponse(r.body)
	if err != nil {
		return engine.Result{}, fmt.Errorf("tinker %s: malformed answer: %w", endpoint, err)
	}
	res, err := checkSample(out, s)
	if err != nil {
		return engine.Result{}, fmt.Errorf("tinker %s: %w", endpoint, err)
	}
	res.Model, res.ModelVersion = e.name, version
	return res, nil
}

// checkSample validates one sample answer against its request: one
// sequence, at most MaxTokens tokens, a log-prob per token, a stop reason
// that agrees with the tokens.
func checkSample(out SampleResponse, s engine.Sampling) (engine.Result, error) {
	if len(out.Sequences) != 1 {
		return engine.Result{}, fmt.Errorf("%d sequences for num_samples 1", len(out.Sequences))
	}
	q := out.Sequences[0]
	if len(q.Tokens) == 0 || len(q.Tokens) > s.MaxTokens {
		return engine.Result{}, fmt.Errorf("%d tokens for max_tokens %d", len(q.Tokens), s.MaxTokens)
	}
	if len(q.Logprobs) != len(q.Tokens) {
		return engine.Result{}, fmt.Errorf("%d logprobs for %d tokens", len(q.Logprobs), len(q.Tokens))
	}
	for i, x := range q.Logprobs {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) || x > 0 {
			return engine.Result{}, fmt.Errorf("logprob %v at token %d", x, i)
		}
	}
	for i, id := range q.Tokens {
		if id < 0 {
			return engine.Result{}, fmt.Errorf("token id %d at %d", id, i)
		}
	}
	res := engine.Result{IDs: q.Tokens, Logprobs: q.Logprobs, FinishReason: engine.FinishLength}
	if q.StopReason == StopReasonStop {
		res.FinishReason = engine.FinishStop
	}
	return res, nil
}
