package proxy

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/store"
)

// The default bounds of stored bytes per call and per attempt.
const (
	DefaultStoredCallBytes    = api.DefaultMaxStoredCallBytes
	DefaultStoredAttemptBytes = 256 << 20
)

// eventData encodes the model_request event of c (an api.ModelCall) and
// sets lay to its layout.
func (c *call) eventData(resp []byte, lay *store.CallLayout) []byte {
	res := c.res
	var asked engine.Sampling
	if c.chat != nil {
		asked = c.chat.Sampling
	} else {
		asked = c.complete.Sampling
	}
	samp := asked
	if res.Sampling != nil {
		samp = *res.Sampling
	}
	mc := api.ModelCall{
		CallID: c.id, API: c.shape.name, Model: res.Model, ModelVersion: res.ModelVersion, Agent: c.target.Agent,
		PromptIDs: res.PromptIDs, ResponseIDs: res.ResponseIDs, ResponseLogprobs: res.Logprobs,
		NoTokenIDs: res.NoTokenIDs, FinishReason: res.FinishReason,
		Continued: res.Continued, RenderReason: res.RenderReason, UpstreamRendered: res.UpstreamRendered,
		Request: c.body, Response: resp,
		Usage:     api.Usage{PromptTokens: res.PromptTokens, CompletionTokens: res.CompletionTokens},
		LatencyMS: float64(time.Since(c.start).Microseconds()) / 1000,
		Retries:   res.Retries, Stream: c.stream || c.arrayStream,
	}
	if mc.FinishReason == engine.FinishStop && len(res.Message.ToolCalls) > 0 {
		// As the response says it (tool_calls, tool_use, function calls).
		mc.FinishReason = api.FinishToolCalls
	}
	mc.Ignored = c.ignored
	if asked.MaxTokens > samp.MaxTokens {
		mc.Ignored = append(mc.Ignored, "max_tokens ("+strconv.Itoa(asked.MaxTokens)+" clamped to "+strconv.Itoa(samp.MaxTokens)+", the room left in the context)")
	}
	mc.Sampling = appendSampling(make([]byte, 0, 96), &samp)
	return appendModelCall(make([]byte, 0, 512+len(c.body)+len(resp)+len(res.PromptIDsJSON)+12*(len(res.PromptIDs)+len(res.ResponseIDs))), &mc, res.PromptIDsJSON, lay)
}

// record appends the model_request event for c.
func (p *Proxy) record(ctx context.Context, c *call, resp []byte) *apiError {
	lay := new(store.CallLayout)
	data := c.eventData(resp, lay)
	return p.store(ctx, c, data, lay)
}

// recordError appends the model_request event of a call refused or failed
// with e after its key was authenticated (api.CallError): the status and
// the error body the caller got, bounded by api.MaxCallErrorBytes; no ids
// and no request, so that it is no base for the store's encoding of the
// agent's next call (store.BaseOf). It is subject to the stored-bytes
// bounds like any event; one they refuse, or one the store fails to
// write, is dropped: the caller gets e either way. An error marked
// unrecorded (Agent Lightning's route, no answer from the upstream)
// leaves no record, as on AL.
func (p *Proxy) recordError(ctx context.Context, c *call, e *apiError) {
	if e.unrecorded {
		return
	}
	id := c.id
	if id == "" {
		id = p.newID(c.shape.idPrefix)
	}
	body := errorBody(callStyle(ctx, c.shape), e)
	if len(body) > api.MaxCallErrorBytes {
		// Cut before the rune that crosses the bound.
		cut := api.MaxCallErrorBytes
		for cut > 0 && !utf8.RuneStart(body[cut]) {
			cut--
		}
		body = body[:cut]
	}
	mc := api.ModelCall{
		CallID: id, API: c.shape.name, Model: c.model, Agent: c.target.Agent,
		LatencyMS: float64(time.Since(c.start).Microseconds()) / 1000,
		Stream:    c.stream || c.arrayStream,
		Status:    api.CallError, HTTPStatus: e.Status, Error: string(body),
	}
	if mc.Model == "" {
		mc.Model = c.pathModel
	}
	lay := new(store.CallLayout)
	data := appendModelCall(make([]byte, 0, 256+len(mc.Error)), &mc, nil, lay)
	_ = p.store(ctx, c, data, lay)
}

// store appends data, c's model_request event laid out as lay, if the
// stored-bytes bounds allow it.
func (p *Proxy) store(ctx context.Context, c *call, data []byte, lay *store.CallLayout) *apiError {
	// The event must land even if the client went away: it records tokens
	// the engine spent.
	ctx = context.WithoutCancel(ctx)
	evs := []store.NewEvent{{Type: store.EventModelRequest, Time: time.Now(), Data: data, DataValid: true, Layout: lay}}
	// The one place a call is refused for what it would store.
	b := p.sizes.Batch()
	enc := b.Encode(c.target.RolloutID, c.target.AttemptID, evs[0])
	// The attempt's count starts from what the store holds (a restart
	// does not reset it), read once per attempt and process.
	if sb, ok := p.st.(store.StoredBytes); ok && p.cfg.StoredAttemptBytes > 0 && !p.usage.counted(c.target) {
		n, err := sb.StoredEventBytes(ctx, c.target.RolloutID, c.target.AttemptID, store.EventModelRequest)
		if err != nil {
			return &apiError{Status: http.StatusInternalServerError, Message: "record call: " + err.Error()}
		}
		p.usage.seed(c.target, n)
	}
	if aerr := p.usage.store(p.cfg, c.target, int64(len(enc.Data))); aerr != nil {
		return aerr
	}
	// The store reuses this encoding where its base is the same call.
	evs[0].Encoded = &enc
	var err error
	if r, ok := p.st.(store.EventRecorder); ok {
		err = r.RecordEvents(ctx, c.target.RolloutID, c.target.AttemptID, evs)
	} else {
		_, err = p.st.AppendEvents(ctx, c.target.RolloutID, c.target.AttemptID, evs)
	}
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return &apiError{Status: http.StatusConflict, Message: "record call: " + err.Error(), Code: "attempt_not_running"}
		}
		return &apiError{Status: http.StatusInternalServerError, Message: "record call: " + err.Error()}
	}
	b.Stored(c.target.RolloutID, c.target.AttemptID, enc, int64(p.seq.Add(1)))
	b.Commit()
	return nil
}

// sizesBytes bounds Proxy.sizes: a base not held (evicted, or after a
// restart) measures the call whole, a stricter bound.
const sizesBytes = 256 << 20
