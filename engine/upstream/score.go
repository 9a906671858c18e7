package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// promptLogprobsRequest is vLLM's /v1/completions request for the
// log-probs of a token-id prompt: prompt_logprobs k > 0 returns, for each
// prompt position after the first, the prompt token's own log-prob and
// the k most likely tokens' (vLLM's CompletionRequest.prompt_logprobs);
// one generated token is the least the route accepts.
type promptLogprobsRequest struct {
	Model          string  `json:"model"`
	Prompt         []int32 `json:"prompt"`
	MaxTokens      int     `json:"max_tokens"`
	Temperature    float32 `json:"temperature"`
	PromptLogprobs int     `json:"prompt_logprobs"`
}

// promptLogprobsResponse is the part of vLLM's CompletionResponse that
// PromptLogprobs reads: choices[].prompt_logprobs, a list with one entry
// per prompt token, null for the first, else an object from token id (a
// JSON string) to {logprob, rank, decoded_token}. A logprob of −∞ is
// written as null.
type promptLogprobsResponse struct {
	Choices []struct {
		PromptLogprobs []map[string]struct {
			Logprob *float64 `json:"logprob"`
		} `json:"prompt_logprobs"`
	} `json:"choices"`
}

// PromptLogprobs returns the log-prob that model (a configured model name,
// "" for the default) gives each token of ids after the ones before it:
// lp[t] = log p(ids[t] | ids[:t]), lp[0] = 0. It calls /v1/completions
// with the ids as the prompt, prompt_logprobs and max_tokens 1 (vLLM),
// retrying as every call does. An answer without a prompt log-prob for
// every token after the first is an error naming the model and its
// endpoints. vLLM computes prompt log-probs from the raw logits
// (temperature 1), the distribution agl's log-probs are taken from.
func (c *Client) PromptLogprobs(ctx context.Context, modelName string, ids []int32) ([]float32, error) {
	m := c.model(modelName)
	if len(ids) < 2 {
		return make([]float32, len(ids)), nil
	}
	body, err := json.Marshal(promptLogprobsRequest{Model: m.name, Prompt: ids, MaxTokens: 1, Temperature: 1, PromptLogprobs: 1})
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", m.name, err)
	}
	sticky := strconv.Itoa(int(ids[0])) + "/" + strconv.Itoa(len(ids))
	out, _, err := c.post(ctx, m, sticky, "/completions", body)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: prompt log-probs: %w", m.name, err)
	}
	where := func() string {
		return fmt.Sprintf("upstream %s (%s)", m.name, strings.Join(c.Endpoints(m.name, sticky), ", "))
	}
	var resp promptLogprobsResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return nil, fmt.Errorf("%s: decode prompt log-probs: %w", where(), err)
	}
	if len(resp.Choices) == 0 || resp.Choices[0].PromptLogprobs == nil {
		return nil, fmt.Errorf("%s returned no prompt_logprobs: a teacher must serve prompt log-probs (vLLM's /v1/completions with prompt_logprobs)", where())
	}
	pl := resp.Choices[0].PromptLogprobs
	if len(pl) != len(ids) {
		return nil, fmt.Errorf("%s returned prompt_logprobs for %d tokens of a %d-token prompt", where(), len(pl), len(ids))
	}
	lp := make([]float32, len(ids))
	for t := 1; t < len(ids); t++ {
		e, ok := pl[t][strconv.Itoa(int(ids[t]))]
		if !ok {
			return nil, fmt.Errorf("%s returned no prompt log-prob for token %d (id %d)", where(), t, ids[t])
		}
		if e.Logprob == nil {
			lp[t] = float32(math.Inf(-1))
			continue
		}
		lp[t] = float32(*e.Logprob)
	}
	return lp, nil
}
