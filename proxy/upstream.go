package proxy

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/aglrl/agl/engine/upstream"
)

// UpstreamBackend serves calls from OpenAI-compatible servers (vLLM,
// SGLang) through an upstream.Client. The upstream renders the chat
// template itself, so events carry the ids it reports (render reason
// "upstream_rendered"), or no_token_ids when it reports none.
type UpstreamBackend struct {
	c   *upstream.Client
	ids atomic.Uint64
	tag string
}

// NewUpstreamBackend wraps c.
func NewUpstreamBackend(c *upstream.Client) *UpstreamBackend {
	return &UpstreamBackend{c: c, tag: randSuffix()}
}

// ModelName implements Backend.
func (b *UpstreamBackend) ModelName() string { return b.c.DefaultModel() }

func fromUpstream(r *upstream.Result) *Result {
	return &Result{
		Message: r.Message, Text: r.Text,
		PromptIDs: r.PromptIDs, ResponseIDs: r.IDs, Logprobs: r.Logprobs, NoTokenIDs: r.NoTokenIDs,
		FinishReason: r.FinishReason, Model: r.Model, ModelVersion: r.Version,
		RenderReason: ReasonUpstream, Retries: r.Retries,
		PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens,
	}
}

// Chat implements Backend.
func (b *UpstreamBackend) Chat(ctx context.Context, req *ChatRequest) (*Result, error) {
	r, err := b.c.Chat(ctx, upstream.ChatRequest{Model: req.Model, Sticky: req.Target.RolloutID, Conv: req.Conv, Sampling: req.Sampling, Stop: req.Stop})
	if err != nil {
		return nil, err
	}
	res := fromUpstream(r)
	// Tool call ids are the gateway's to give in the caller's id style.
	for i := range res.Message.ToolCalls {
		res.Message.ToolCalls[i].ID = req.ToolIDPrefix + b.tag + strconv.FormatUint(b.ids.Add(1), 36)
	}
	return res, nil
}

// Complete implements Backend.
func (b *UpstreamBackend) Complete(ctx context.Context, req *CompleteRequest) (*Result, error) {
	cr := upstream.CompletionRequest{Model: req.Model, Sticky: req.Target.RolloutID, Sampling: req.Sampling, Stop: req.Stop}
	if req.IDsGiven {
		cr.PromptIDs = req.PromptIDs
	} else {
		cr.Prompt = req.Prompt
	}
	r, err := b.c.Completion(ctx, cr)
	if err != nil {
		return nil, err
	}
	res := fromUpstream(r)
	res.RenderReason = ReasonRawPrompt
	return res, nil
}
