package upstream

import (
	"context"
	"testing"
	"time"

	"github.com/aglrl/agl/engine"
)

// TestMaxContextClamp: with a model's max_context known, a max_tokens that
// cannot fit is clamped: to the exact room left for a token-id prompt, and
// left out for a prompt the upstream tokenizes (Result.MaxTokens then says
// the room the upstream reported it left). One that fits is sent as is.
func TestMaxContextClamp(t *testing.T) {
	v := newVLLM(t)
	c, err := New(Config{Models: []Model{{Name: "m", Endpoints: []string{v.srv.URL + "/v1"}, MaxContext: 1000}}, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		call     func(engine.Sampling) (*Result, error)
		asked    int
		sent     any // the request's max_tokens (nil: not sent)
		recorded int // Result.MaxTokens
	}{
		// The fake's chat answer reports 3 prompt tokens.
		{"chat fits", func(s engine.Sampling) (*Result, error) { return c.Chat(ctx, ChatRequest{Conv: conv, Sampling: s}) }, 50, 50.0, 50},
		{"chat too long", func(s engine.Sampling) (*Result, error) { return c.Chat(ctx, ChatRequest{Conv: conv, Sampling: s}) }, 128000, nil, 997},
		{"chat unset", func(s engine.Sampling) (*Result, error) { return c.Chat(ctx, ChatRequest{Conv: conv, Sampling: s}) }, 0, nil, 0},
		{"text prompt too long", func(s engine.Sampling) (*Result, error) {
			return c.Completion(ctx, CompletionRequest{Prompt: "hello", Sampling: s})
		}, 999, nil, 998},
		{"ids fit", func(s engine.Sampling) (*Result, error) {
			return c.Completion(ctx, CompletionRequest{PromptIDs: []int32{7, 8}, Sampling: s})
		}, 998, 998.0, 998},
		{"ids too long", func(s engine.Sampling) (*Result, error) {
			return c.Completion(ctx, CompletionRequest{PromptIDs: []int32{7, 8}, Sampling: s})
		}, 128000, 998.0, 998},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tc.call(engine.Sampling{MaxTokens: tc.asked})
			if err != nil {
				t.Fatal(err)
			}
			if got := v.lastBody.Load().(map[string]any)["max_tokens"]; got != tc.sent {
				t.Errorf("sent max_tokens %v, want %v", got, tc.sent)
			}
			if r.MaxTokens != tc.recorded {
				t.Errorf("Result.MaxTokens %d, want %d", r.MaxTokens, tc.recorded)
			}
		})
	}
}
