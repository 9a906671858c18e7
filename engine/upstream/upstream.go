// Package upstream calls OpenAI-compatible inference servers (vLLM, SGLang)
// for the gateway: Chat Completions and Completions with
// `return_token_ids: true` and `logprobs: true`, reading vLLM's response
// format (top-level `prompt_token_ids`, the choice's `token_ids`, and
// `logprobs.content[].logprob`).
//
// A model may have several endpoints; a call goes to the endpoint that
// rendezvous-hashes highest for its sticky key (the rollout), so an
// engine's prefix cache is reused across a rollout's calls, and fails over
// to the next one. Calls answered 408, 429 or 5xx (or failing at the
// network level) are retried with jittered exponential backoff, each try
// bounded by a per-request timeout.
package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
)

// Model is one served model and where it is served.
type Model struct {
	// Name is the model name the upstream serves (sent as "model").
	Name string `json:"name" yaml:"name"`
	// Endpoints are base URLs ending in /v1, e.g. http://10.0.0.5:8000/v1.
	Endpoints []string `json:"endpoints" yaml:"endpoints"`
	// APIKey, if set, is sent as Authorization: Bearer.
	APIKey string `json:"api_key,omitempty" yaml:"api_key,omitempty"`
	// Version is the weights version served (see Client.SetVersion).
	Version int64 `json:"version,omitempty" yaml:"version,omitempty"`
}

// Config configures a Client. Zero values take the documented defaults.
type Config struct {
	// Models served; the first is the default for unknown model names.
	Models []Model `json:"models" yaml:"models"`
	// Timeout bounds one try (default 10 minutes).
	Timeout time.Duration `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	// MaxRetries is how many times a failed try is retried (default 3;
	// negative means none).
	MaxRetries int `json:"max_retries,omitempty" yaml:"max_retries,omitempty"`
	// Backoff is the base delay, doubled per retry with full jitter
	// (default 200ms), capped at MaxBackoff (default 10s). A Retry-After
	// header within MaxBackoff is honoured.
	Backoff    time.Duration `json:"backoff,omitempty" yaml:"backoff,omitempty"`
	MaxBackoff time.Duration `json:"max_backoff,omitempty" yaml:"max_backoff,omitempty"`
	// HTTPClient, if set, carries every call. By default http:// endpoints
	// are called with agl's own HTTP/1.1 client and https:// ones with a
	// pooled net/http client.
	HTTPClient *http.Client `json:"-" yaml:"-"`
}

// Client calls upstream servers. It is safe for concurrent use.
type Client struct {
	cfg    Config
	hc     *http.Client
	h1     *h1Client // nil when Config.HTTPClient is set
	models map[string]*model
	def    *model
}

type model struct {
	name    string
	key     string
	eps     []string
	hashes  []uint64
	version atomic.Int64
}

// New validates cfg and returns a client.
func New(cfg Config) (*Client, error) {
	if len(cfg.Models) == 0 {
		return nil, errors.New("upstream: no models configured")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Minute
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 3
	} else if cfg.MaxRetries < 0 {
		cfg.MaxRetries = 0
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 200 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	c := &Client{cfg: cfg, hc: cfg.HTTPClient, models: map[string]*model{}}
	if c.hc == nil {
		tr := &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
		}
		c.hc = &http.Client{Transport: tr}
		c.h1 = newH1Client()
	}
	for i, m := range cfg.Models {
		if m.Name == "" {
			return nil, fmt.Errorf("upstream: model %d has no name", i)
		}
		if len(m.Endpoints) == 0 {
			return nil, fmt.Errorf("upstream: model %q has no endpoints", m.Name)
		}
		if _, dup := c.models[m.Name]; dup {
			return nil, fmt.Errorf("upstream: model %q configured twice", m.Name)
		}
		mm := &model{name: m.Name, key: m.APIKey}
		for _, ep := range m.Endpoints {
			ep = strings.TrimRight(ep, "/")
			mm.eps = append(mm.eps, ep)
			h := fnv.New64a()
			h.Write([]byte(ep))
			mm.hashes = append(mm.hashes, h.Sum64())
		}
		mm.version.Store(m.Version)
		c.models[m.Name] = mm
		if i == 0 {
			c.def = mm
		}
	}
	return c, nil
}

// DefaultModel is the first configured model's name.
func (c *Client) DefaultModel() string { return c.def.name }

// SetVersion records that model name now serves weights version v (call it
// after a weight swap); it reports whether the model is known.
func (c *Client) SetVersion(name string, v int64) bool {
	m, ok := c.models[name]
	if ok {
		m.version.Store(v)
	}
	return ok
}

func (c *Client) model(name string) *model {
	if m, ok := c.models[name]; ok {
		return m
	}
	return c.def
}

// Endpoints returns the model's endpoints in the order a call with this
// sticky key tries them (rendezvous hashing).
func (c *Client) Endpoints(modelName, sticky string) []string {
	m := c.model(modelName)
	order := m.order(sticky)
	out := make([]string, len(order))
	for i, j := range order {
		out[i] = m.eps[j]
	}
	return out
}

func mix(x uint64) uint64 { // splitmix64 finalizer
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func (m *model) order(sticky string) []int {
	idx := make([]int, len(m.eps))
	for i := range idx {
		idx[i] = i
	}
	if len(idx) < 2 {
		return idx
	}
	h := fnv.New64a()
	h.Write([]byte(sticky))
	k := h.Sum64()
	slices.SortFunc(idx, func(a, b int) int {
		sa, sb := mix(m.hashes[a]^k), mix(m.hashes[b]^k)
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	return idx
}

// HTTPError is a non-2xx answer from the upstream.
type HTTPError struct {
	Status int
	Body   []byte
}

func (e *HTTPError) Error() string {
	return "upstream answered " + strconv.Itoa(e.Status) + ": " + e.Message()
}

// Message extracts the error message of an OpenAI-shaped error body.
func (e *HTTPError) Message() string {
	var b struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(e.Body, &b) == nil {
		if b.Error.Message != "" {
			return b.Error.Message
		}
		if b.Message != "" {
			return b.Message
		}
	}
	s := string(e.Body)
	if len(s) > 512 {
		s = s[:512]
	}
	return s
}

func retryable(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500
}

// post sends body to path of the chosen endpoint, retrying as configured.
// It returns the 2xx body and the number of retries made.
func (c *Client) post(ctx context.Context, m *model, sticky, path string, body []byte) ([]byte, int, error) {
	order := m.order(sticky)
	var lastErr error
	for try := 0; ; try++ {
		ep := m.eps[order[try%len(order)]]
		out, status, retryAfter, err := c.once(ctx, ep+path, m.key, body)
		if err == nil && status/100 == 2 {
			return out, try, nil
		}
		if err == nil {
			lastErr = &HTTPError{Status: status, Body: out}
			if !retryable(status) {
				return nil, try, lastErr
			}
		} else {
			lastErr = err
			if ctx.Err() != nil {
				return nil, try, err
			}
		}
		if try >= c.cfg.MaxRetries {
			return nil, try, fmt.Errorf("after %d retries: %w", try, lastErr)
		}
		d := c.cfg.Backoff << try
		if d > c.cfg.MaxBackoff || d <= 0 {
			d = c.cfg.MaxBackoff
		}
		d = d/2 + rand.N(d/2+1) // jitter in [d/2, d]
		if retryAfter > 0 && retryAfter <= c.cfg.MaxBackoff && retryAfter > d {
			d = retryAfter
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, try, fmt.Errorf("%w (last error: %v)", ctx.Err(), lastErr)
		case <-t.C:
		}
	}
}

// maxResponseBytes bounds an upstream answer.
const maxResponseBytes = 256 << 20

func (c *Client) once(ctx context.Context, url, key string, body []byte) (out []byte, status int, retryAfter time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	if c.h1 != nil {
		if t, ok := parseH1(url); ok {
			return c.h1.post(ctx, t, key, body)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, 0, 0, err
	}
	defer resp.Body.Close()
	n := resp.ContentLength
	if n < 0 || n > maxResponseBytes {
		n = 4096
	}
	buf := bytes.NewBuffer(make([]byte, 0, n+1))
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, maxResponseBytes)); err != nil {
		return nil, 0, 0, fmt.Errorf("read upstream answer: %w", err)
	}
	if s := resp.Header.Get("Retry-After"); s != "" {
		if secs, err := strconv.ParseFloat(s, 64); err == nil && secs > 0 {
			retryAfter = time.Duration(secs * float64(time.Second))
		}
	}
	return buf.Bytes(), resp.StatusCode, retryAfter, nil
}

// ChatRequest is one Chat Completions call.
type ChatRequest struct {
	// Model is the requested name; unknown names go to the default model.
	Model string
	// Sticky picks the endpoint (use the rollout id).
	Sticky   string
	Conv     chat.Conversation
	Sampling engine.Sampling
	Stop     []string
}

// CompletionRequest is one Completions call with a text or token-id prompt.
type CompletionRequest struct {
	Model     string
	Sticky    string
	Prompt    string
	PromptIDs []int32
	Sampling  engine.Sampling
	Stop      []string
}

// Result is one upstream generation.
type Result struct {
	Message chat.Message // Chat
	Text    string       // Completion
	// PromptIDs, IDs and Logprobs are what the upstream reported; NoTokenIDs
	// is set when it reported no ids (a hosted API).
	PromptIDs  []int32
	IDs        []int32
	Logprobs   []float32
	NoTokenIDs bool
	// FinishReason is engine.FinishStop or engine.FinishLength.
	FinishReason string
	Model        string
	Version      int64
	Retries      int

	PromptTokens, CompletionTokens int
}

type wireFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Arguments   *string         `json:"arguments,omitempty"`
}

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireMessage struct {
	Role       string         `json:"role"`
	Content    *string        `json:"content"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	Name       string         `json:"name,omitempty"`
}

type wireTool struct {
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireRequest struct {
	Model          string        `json:"model"`
	Messages       []wireMessage `json:"messages,omitempty"`
	Prompt         any           `json:"prompt,omitempty"`
	Tools          []wireTool    `json:"tools,omitempty"`
	Temperature    float32       `json:"temperature"`
	TopP           float32       `json:"top_p,omitempty"`
	TopK           int           `json:"top_k,omitempty"`
	MaxTokens      int           `json:"max_tokens,omitempty"`
	Seed           *uint64       `json:"seed,omitempty"`
	Stop           []string      `json:"stop,omitempty"`
	StopTokenIDs   []int32       `json:"stop_token_ids,omitempty"`
	Logprobs       any           `json:"logprobs"`
	ReturnTokenIDs bool          `json:"return_token_ids"`
	Stream         bool          `json:"stream"`
}

type wireChoice struct {
	Message struct {
		Content          *string        `json:"content"`
		ReasoningContent string         `json:"reasoning_content"`
		Reasoning        string         `json:"reasoning"`
		ToolCalls        []wireToolCall `json:"tool_calls"`
	} `json:"message"`
	Text           string  `json:"text"`
	FinishReason   string  `json:"finish_reason"`
	TokenIDs       []int32 `json:"token_ids"`
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	Logprobs       *struct {
		Content []struct {
			Logprob float32 `json:"logprob"`
		} `json:"content"`
		TokenLogprobs []float32 `json:"token_logprobs"`
	} `json:"logprobs"`
}

type wireResponse struct {
	Model          string       `json:"model"`
	PromptTokenIDs []int32      `json:"prompt_token_ids"`
	Choices        []wireChoice `json:"choices"`
	Usage          struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func sampling(w *wireRequest, s engine.Sampling, stop []string) {
	w.Temperature = s.Temperature
	if s.TopP > 0 && s.TopP < 1 {
		w.TopP = s.TopP
	}
	w.TopK = s.TopK
	w.MaxTokens = s.MaxTokens
	if s.Seed != 0 {
		seed := s.Seed
		w.Seed = &seed
	}
	w.Stop = stop
	w.StopTokenIDs = s.StopIDs
	w.ReturnTokenIDs = true
}

// Chat sends a Chat Completions call.
func (c *Client) Chat(ctx context.Context, req ChatRequest) (*Result, error) {
	m := c.model(req.Model)
	w := wireRequest{Model: m.name, Logprobs: true}
	sampling(&w, req.Sampling, req.Stop)
	w.Messages = make([]wireMessage, len(req.Conv.Messages))
	for i := range req.Conv.Messages {
		msg := &req.Conv.Messages[i]
		wm := wireMessage{Role: msg.Role, ToolCallID: msg.ToolCallID, Name: msg.Name}
		content := msg.Content
		if msg.Role != chat.RoleAssistant || content != "" || len(msg.ToolCalls) == 0 {
			wm.Content = &content
		}
		for _, tc := range msg.ToolCalls {
			wt := wireToolCall{ID: tc.ID, Type: "function"}
			wt.Function.Name, wt.Function.Arguments = tc.Name, tc.Arguments
			wm.ToolCalls = append(wm.ToolCalls, wt)
		}
		w.Messages[i] = wm
	}
	for _, t := range req.Conv.Tools {
		w.Tools = append(w.Tools, wireTool{Type: "function", Function: wireFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}})
	}
	return c.call(ctx, m, req.Sticky, "/chat/completions", &w)
}

// Completion sends a Completions call.
func (c *Client) Completion(ctx context.Context, req CompletionRequest) (*Result, error) {
	m := c.model(req.Model)
	w := wireRequest{Model: m.name, Logprobs: 0}
	sampling(&w, req.Sampling, req.Stop)
	if req.PromptIDs != nil {
		w.Prompt = req.PromptIDs
	} else {
		w.Prompt = req.Prompt
	}
	return c.call(ctx, m, req.Sticky, "/completions", &w)
}

func (c *Client) call(ctx context.Context, m *model, sticky, path string, w *wireRequest) (*Result, error) {
	body, ok := appendRequest(make([]byte, 0, 1024), w)
	if !ok {
		var err error
		if body, err = json.Marshal(w); err != nil {
			return nil, fmt.Errorf("encode upstream request: %w", err)
		}
	}
	out, retries, err := c.post(ctx, m, sticky, path, body)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", m.name, err)
	}
	var resp wireResponse
	if !decodeAnswer(out, &resp) {
		resp = wireResponse{}
		if err := json.Unmarshal(out, &resp); err != nil {
			return nil, fmt.Errorf("upstream %s: decode answer: %w", m.name, err)
		}
	}
	if len(resp.Choices) == 0 {
		return nil, fmt.Errorf("upstream %s: answer has no choices", m.name)
	}
	ch := &resp.Choices[0]
	r := &Result{
		Text:             ch.Text,
		PromptIDs:        resp.PromptTokenIDs,
		IDs:              ch.TokenIDs,
		Model:            m.name,
		Version:          m.version.Load(),
		Retries:          retries,
		PromptTokens:     resp.Usage.PromptTokens,
		CompletionTokens: resp.Usage.CompletionTokens,
	}
	if r.PromptIDs == nil {
		r.PromptIDs = ch.PromptTokenIDs
	}
	if ch.Logprobs != nil {
		if len(ch.Logprobs.Content) > 0 {
			r.Logprobs = make([]float32, len(ch.Logprobs.Content))
			for i, lp := range ch.Logprobs.Content {
				r.Logprobs[i] = lp.Logprob
			}
		} else {
			r.Logprobs = ch.Logprobs.TokenLogprobs
		}
	}
	if r.IDs == nil || r.PromptIDs == nil {
		r.NoTokenIDs = true
		r.IDs, r.PromptIDs = nil, nil
	}
	if len(r.Logprobs) != len(r.IDs) {
		r.Logprobs = nil
	}
	switch ch.FinishReason {
	case "length":
		r.FinishReason = engine.FinishLength
	default:
		r.FinishReason = engine.FinishStop
	}
	msg := chat.Message{Role: chat.RoleAssistant, Reasoning: ch.Message.ReasoningContent}
	if msg.Reasoning == "" {
		msg.Reasoning = ch.Message.Reasoning
	}
	if ch.Message.Content != nil {
		msg.Content = *ch.Message.Content
	}
	for _, tc := range ch.Message.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	r.Message = msg
	if r.PromptTokens == 0 {
		r.PromptTokens = len(r.PromptIDs)
	}
	if r.CompletionTokens == 0 {
		r.CompletionTokens = len(r.IDs)
	}
	return r, nil
}
