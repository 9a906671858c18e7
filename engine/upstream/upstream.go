// Package upstream calls OpenAI-compatible inference servers (vLLM, SGLang)
// for the gateway: Chat Completions and Completions with
// `return_token_ids: true` and `logprobs: true`, reading vLLM's response
// format (top-level `prompt_token_ids`, the choice's `token_ids`, and
// `logprobs.content[].logprob`).
//
// A model may have several endpoints, changed at run time by Update (the
// model registry); a call goes to the endpoint its sticky key (the
// rollout id) hashes to over the sorted endpoints, as Agent Lightning
// does, so an engine's prefix cache is reused across a rollout's calls,
// and fails over to the next one; an endpoint that cannot be reached is
// tried last for a while. Calls answered 408, 429 or 5xx (or failing at the
// network level) are retried with jittered exponential backoff, each try
// bounded by a per-request timeout.
package upstream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/internal/fastjson"
)

// Model is one served model and where it is served.
type Model struct {
	// Name is the model name the upstream serves (sent as "model").
	Name string `json:"name" yaml:"name"`
	// Endpoints are base URLs ending in /v1, e.g. http://10.0.0.5:8000/v1.
	// It may be empty when the endpoints come from the model registry
	// (POST /api/models; see Client.Update): calls fail with
	// ErrNoEndpoints until one is registered.
	Endpoints []string `json:"endpoints" yaml:"endpoints"`
	// APIKey, if set, is sent as Authorization: Bearer.
	APIKey string `json:"api_key,omitempty" yaml:"api_key,omitempty"`
	// Version is the weights version served (see Client.Update).
	Version int64 `json:"version,omitempty" yaml:"version,omitempty"`
	// Mode is ModeToken (agl renders the chat template and keeps the token
	// state, calling /v1/completions with token-id prompts) or ModeChat
	// (the upstream renders: /v1/chat/completions). Default: ModeToken
	// when TokenizerDir is set, else ModeChat.
	Mode string `json:"mode,omitempty" yaml:"mode,omitempty"`
	// TokenizerDir holds the model's tokenizer.json (and optionally
	// agl_chat.json naming the template; else it is inferred: Qwen/ChatML
	// or Llama 3), needed by ModeToken.
	TokenizerDir string `json:"tokenizer_dir,omitempty" yaml:"tokenizer_dir,omitempty"`
	// MaxContext is the served context length (vLLM's --max-model-len),
	// required in ModeToken: each call asks for at most the room left. In
	// ModeChat a call whose max_tokens might not fit beside its prompt is
	// sent without one, so that the upstream answers in the room left.
	MaxContext int `json:"max_context,omitempty" yaml:"max_context,omitempty"`
}

// Modes of Model.Mode.
const (
	ModeToken = "token"
	ModeChat  = "chat"
)

// EffectiveMode is m.Mode with its default filled in.
func (m Model) EffectiveMode() string {
	if m.Mode != "" {
		return m.Mode
	}
	if m.TokenizerDir != "" {
		return ModeToken
	}
	return ModeChat
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
	// DeadFor is how long an endpoint that could not be reached (refused
	// or failed connection) is tried last by every call (default 10s).
	DeadFor time.Duration `json:"dead_for,omitempty" yaml:"dead_for,omitempty"`
	// HTTPClient, if set, carries every call. By default http:// endpoints
	// are called with agl's own HTTP/1.1 client and https:// ones with a
	// pooled net/http client.
	HTTPClient *http.Client `json:"-" yaml:"-"`
}

// ErrNoEndpoints is returned for a model that has no endpoint (none
// configured, none registered yet).
var ErrNoEndpoints = errors.New("no endpoints registered for the model")

// Client calls upstream servers. It is safe for concurrent use; Update
// changes the routing table while calls run.
type Client struct {
	cfg Config
	hc  *http.Client
	h1  *h1Client // nil when Config.HTTPClient is set

	mu     sync.RWMutex // guards models (a model's fields are atomic)
	models map[string]*model
	def    *model
}

type model struct {
	name       string
	key        string
	maxContext int                         // 0: unknown
	eps        atomic.Pointer[[]*endpoint] // sorted by URL; replaced, never changed
	version    atomic.Int64
}

type endpoint struct {
	url string
	// deadUntil (UnixNano) puts the endpoint last in every call's order.
	deadUntil atomic.Int64
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
	if cfg.DeadFor <= 0 {
		cfg.DeadFor = 10 * time.Second
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
		if _, dup := c.models[m.Name]; dup {
			return nil, fmt.Errorf("upstream: model %q configured twice", m.Name)
		}
		switch m.EffectiveMode() {
		case ModeChat:
		case ModeToken:
			if m.TokenizerDir == "" {
				return nil, fmt.Errorf("upstream: model %q: mode %q needs tokenizer_dir (the model's tokenizer.json) to render its chat template", m.Name, ModeToken)
			}
			if m.MaxContext <= 0 {
				// vLLM's /v1/completions generates 16 tokens when max_tokens
				// is not sent; agl sends the room left in the context.
				return nil, fmt.Errorf("upstream: model %q: mode %q needs max_context (vLLM's --max-model-len) to bound each response", m.Name, ModeToken)
			}
		default:
			return nil, fmt.Errorf("upstream: model %q: unknown mode %q (want %q or %q)", m.Name, m.Mode, ModeToken, ModeChat)
		}
		if m.MaxContext < 0 {
			return nil, fmt.Errorf("upstream: model %q: max_context %d is negative", m.Name, m.MaxContext)
		}
		mm := &model{name: m.Name, key: m.APIKey, maxContext: m.MaxContext}
		if err := mm.setEndpoints(m.Endpoints); err != nil {
			return nil, fmt.Errorf("upstream: model %q: %w", m.Name, err)
		}
		mm.version.Store(m.Version)
		c.models[m.Name] = mm
		if i == 0 {
			c.def = mm
		}
	}
	return c, nil
}

// setEndpoints replaces m's endpoints by urls (sorted, deduplicated),
// keeping the dead marks of the ones that stay.
func (m *model) setEndpoints(urls []string) error {
	old := map[string]*endpoint{}
	if p := m.eps.Load(); p != nil {
		for _, e := range *p {
			old[e.url] = e
		}
	}
	eps := make([]*endpoint, 0, len(urls))
	seen := map[string]bool{}
	for _, u := range urls {
		u = strings.TrimRight(strings.TrimSpace(u), "/")
		if u == "" {
			return errors.New("empty endpoint URL")
		}
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("endpoint %q: want an http:// or https:// base URL ending in /v1", u)
		}
		if seen[u] {
			continue
		}
		seen[u] = true
		e := old[u]
		if e == nil {
			e = &endpoint{url: u}
		}
		eps = append(eps, e)
	}
	slices.SortFunc(eps, func(a, b *endpoint) int { return strings.Compare(a.url, b.url) })
	m.eps.Store(&eps)
	return nil
}

// DefaultModel is the first configured model's name.
func (c *Client) DefaultModel() string { return c.def.name }

// SetVersion records that model name now serves weights version v (call it
// after a weight swap); it reports whether the model is known.
func (c *Client) SetVersion(name string, v int64) bool {
	c.mu.RLock()
	m, ok := c.models[name]
	c.mu.RUnlock()
	if ok {
		m.version.Store(v)
	}
	return ok
}

// Update applies a model registration to the live routing table: model
// name now serves weights version (ignored when 0) from endpoints (nil
// keeps the current ones; an empty non-nil list removes them all). A name
// not configured becomes a new model (chat mode, no API key), reachable by
// its name. Calls already sent finish where they are; later calls use the
// new table.
func (c *Client) Update(name string, version int64, endpoints []string) error {
	if name == "" {
		return errors.New("upstream: update: model name is empty")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.models[name]
	if !ok {
		m = &model{name: name}
		if err := m.setEndpoints(endpoints); err != nil {
			return fmt.Errorf("upstream: model %q: %w", name, err)
		}
		m.version.Store(version)
		c.models[name] = m
		return nil
	}
	if endpoints != nil {
		if err := m.setEndpoints(endpoints); err != nil {
			return fmt.Errorf("upstream: model %q: %w", name, err)
		}
	}
	if version != 0 {
		m.version.Store(version)
	}
	return nil
}

// ModelInfo is one model's live routing state.
type ModelInfo struct {
	Name      string
	Version   int64
	Endpoints []string // sorted
}

// Models returns the live routing table, by name.
func (c *Client) Models() []ModelInfo {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]ModelInfo, 0, len(c.models))
	for _, m := range c.models {
		mi := ModelInfo{Name: m.name, Version: m.version.Load()}
		for _, e := range *m.eps.Load() {
			mi.Endpoints = append(mi.Endpoints, e.url)
		}
		out = append(out, mi)
	}
	slices.SortFunc(out, func(a, b ModelInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (c *Client) model(name string) *model {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if m, ok := c.models[name]; ok {
		return m
	}
	return c.def
}

// Endpoints returns the model's endpoints in the order a call with this
// sticky key tries them (see order).
func (c *Client) Endpoints(modelName, sticky string) []string {
	order := c.model(modelName).order(sticky, time.Now())
	out := make([]string, len(order))
	for i, e := range order {
		out[i] = e.url
	}
	return out
}

// stickyIndex is Agent Lightning's choice of endpoint for a rollout:
// the first 8 bytes of SHA-256(rollout id), big-endian, modulo the number
// of endpoints sorted by URL (agentlightning/server/proxy.py,
// ProxyRouter.select_server), so that all calls of a rollout reach the
// same engine and reuse its prefix cache.
func stickyIndex(sticky string, n int) int {
	d := sha256.Sum256([]byte(sticky))
	return int(binary.BigEndian.Uint64(d[:8]) % uint64(n))
}

// order is the endpoints a call with this sticky key tries: the sticky
// one first, then the others in sorted order after it (wrapping), with
// endpoints marked dead moved to the end.
func (m *model) order(sticky string, now time.Time) []*endpoint {
	eps := *m.eps.Load()
	n := len(eps)
	if n == 0 {
		return nil
	}
	out := make([]*endpoint, 0, n)
	start := stickyIndex(sticky, n)
	t := now.UnixNano()
	for i := range n {
		if e := eps[(start+i)%n]; e.deadUntil.Load() <= t {
			out = append(out, e)
		}
	}
	for i := range n {
		if e := eps[(start+i)%n]; e.deadUntil.Load() > t {
			out = append(out, e)
		}
	}
	return out
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

// post sends body to path of the chosen endpoint, retrying as configured:
// an endpoint that cannot be reached is marked dead (tried last by every
// call for Config.DeadFor) and the call goes to the next endpoint at once.
// It returns the 2xx body and the number of retries made.
func (c *Client) post(ctx context.Context, m *model, sticky, path string, body []byte) ([]byte, int, error) {
	order := m.order(sticky, time.Now())
	if len(order) == 0 {
		return nil, 0, fmt.Errorf("%w %q", ErrNoEndpoints, m.name)
	}
	var lastErr error
	for try := 0; ; try++ {
		ep := order[try%len(order)]
		out, status, retryAfter, err := c.once(ctx, ep.url+path, m.key, body)
		if err == nil && status/100 == 2 {
			return out, try, nil
		}
		failover := false
		if err == nil {
			lastErr = &HTTPError{Status: status, Body: out}
			if !retryable(status) {
				return nil, try, lastErr
			}
		} else {
			lastErr = fmt.Errorf("%s: %w", ep.url, err)
			if ctx.Err() != nil {
				return nil, try, lastErr
			}
			if unreachable(err) {
				ep.deadUntil.Store(time.Now().Add(c.cfg.DeadFor).UnixNano())
				failover = len(order) > 1
			}
		}
		if try >= c.cfg.MaxRetries {
			return nil, try, fmt.Errorf("after %d retries: %w", try, lastErr)
		}
		if failover {
			continue // another endpoint, no need to wait
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

// unreachable reports whether err means the endpoint could not be reached
// at all (refused, reset or failed connection, unknown host), not that it
// answered slowly.
func unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial"
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
	// Body, when set, is sent as is instead of a body built from the
	// fields above (no max_tokens bound either): a caller's own request,
	// as Agent Lightning's proxy forwards it. The answer is read the same.
	Body []byte
}

// CompletionRequest is one Completions call with a text or token-id prompt.
type CompletionRequest struct {
	Model     string
	Sticky    string
	Prompt    string
	PromptIDs []int32
	Sampling  engine.Sampling
	Stop      []string
	// Body, when set, is sent as is (see ChatRequest.Body).
	Body []byte
}

// Result is one upstream generation.
type Result struct {
	Message chat.Message // Chat
	Text    string       // Completion
	// PromptIDsJSON, IDs and Logprobs are what the upstream reported;
	// NoTokenIDs is set when it reported no ids (a hosted API). The
	// prompt's ids are kept as a JSON array written as encoding/json
	// writes an []int32 ("[1,2,3]"): the upstream's own bytes when it
	// wrote them so (vLLM and SGLang do), checked but neither converted
	// nor printed again, since a chat-mode call's tens of thousands of
	// prompt ids only go into its model_request event.
	PromptIDsJSON []byte
	IDs           []int32
	Logprobs      []float32
	NoTokenIDs    bool
	// FinishReason is engine.FinishStop or engine.FinishLength.
	FinishReason string
	Model        string
	Version      int64
	Retries      int
	// MaxTokens is the response bound the upstream applied: the one asked
	// for, or, when it might not fit in the model's max_context beside the
	// prompt and was not sent, the room the upstream left (max_context -
	// PromptTokens).
	MaxTokens int

	PromptTokens, CompletionTokens int
	// Raw is the answer as the upstream sent it (read-only: the fields
	// above may share its bytes), for a caller that passes it on as is.
	Raw []byte
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
	PromptTokenIDs wireIDs `json:"prompt_token_ids"`
	Logprobs       *struct {
		Content []struct {
			Logprob float32 `json:"logprob"`
		} `json:"content"`
		TokenLogprobs []float32 `json:"token_logprobs"`
	} `json:"logprobs"`
}

// wireIDs is a token id array as the upstream wrote it.
type wireIDs struct {
	raw []byte
	// canonical: raw is written as encoding/json writes an []int32, with
	// n ids.
	canonical bool
	n         int
}

// UnmarshalJSON keeps the raw value (encoding/json's path for an answer
// the fast decoder does not read).
func (w *wireIDs) UnmarshalJSON(b []byte) error {
	*w = wireIDs{raw: bytes.Clone(b)}
	return nil
}

// promptIDs returns ids as a JSON array written as encoding/json writes
// an []int32, nil for none (absent or null), and the number of ids.
func promptIDs(ids wireIDs) ([]byte, int, error) {
	if ids.canonical {
		return ids.raw, ids.n, nil
	}
	if len(ids.raw) == 0 || string(ids.raw) == "null" {
		return nil, 0, nil
	}
	s := fastjson.New(ids.raw)
	if t, n, ok := s.Int32sText(); ok && s.End() {
		return t, n, nil
	}
	var v []int32
	if err := json.Unmarshal(ids.raw, &v); err != nil {
		return nil, 0, fmt.Errorf("prompt_token_ids: %w", err)
	}
	if v == nil {
		return nil, 0, nil
	}
	return fastjson.AppendInt32s(nil, v), len(v), nil
}

type wireResponse struct {
	Model          string       `json:"model"`
	PromptTokenIDs wireIDs      `json:"prompt_token_ids"`
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

// templateSlack bounds the tokens a chat template adds to a conversation
// beyond its body's bytes (a default system prompt, a generation prompt).
const templateSlack = 256

// encodeRequest returns w's JSON, as json.Marshal writes it. A prompt of
// token ids is written by fastjson.AppendInt32s where json.Marshal puts it
// (after the model when there are no messages): for a long prompt that
// takes half the time of encoding/json's []int32.
func encodeRequest(w *wireRequest) ([]byte, error) {
	ids, isIDs := w.Prompt.([]int32)
	if isIDs && len(w.Messages) == 0 {
		rest := *w
		rest.Prompt = nil
		w = &rest
	}
	body, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode upstream request: %w", err)
	}
	if !isIDs || w.Prompt != nil {
		return body, nil
	}
	n := len(`{"model":`) + len(fastjson.AppendString(nil, w.Model))
	out := make([]byte, 0, len(body)+len(`,"prompt":`)+12*len(ids))
	out = append(out, body[:n]...)
	out = append(out, `,"prompt":`...)
	out = fastjson.AppendInt32s(out, ids)
	return append(out, body[n:]...), nil
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
	return c.call(ctx, m, req.Sticky, "/chat/completions", &w, req.Body)
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
	return c.call(ctx, m, req.Sticky, "/completions", &w, req.Body)
}

// encodeCall encodes w for model m, with max_tokens bounded by the
// model's max_context (clamped: a bound that might not fit was not sent).
func (c *Client) encodeCall(m *model, w *wireRequest) (body []byte, clamped bool, err error) {
	body, err = encodeRequest(w)
	if err != nil {
		return nil, false, err
	}
	if ids, isIDs := w.Prompt.([]int32); isIDs && m.maxContext > 0 {
		// The prompt's length is known: ask for at most the room left
		// (a prompt that leaves none is the upstream's to refuse).
		if room := m.maxContext - len(ids); room > 0 && w.MaxTokens > room {
			w.MaxTokens = room
			if body, err = encodeRequest(w); err != nil {
				return nil, false, err
			}
		}
	} else if m.maxContext > 0 && w.MaxTokens > 0 && w.MaxTokens > m.maxContext-len(body)-templateSlack {
		// The upstream renders and tokenizes the prompt; a token is at
		// least a byte of the body, so a bound that fits beside the body's
		// bytes (and what a chat template adds) fits beside the prompt.
		// One that might not is not sent:
		// vLLM refuses a max_tokens beyond the room left, and answers in
		// the room left when none is given.
		w.MaxTokens, clamped = 0, true
		if body, err = encodeRequest(w); err != nil {
			return nil, false, err
		}
	}
	return body, clamped, nil
}

func (c *Client) call(ctx context.Context, m *model, sticky, path string, w *wireRequest, raw []byte) (*Result, error) {
	asked := w.MaxTokens
	clamped := false
	body := raw
	if raw == nil {
		var err error
		if body, clamped, err = c.encodeCall(m, w); err != nil {
			return nil, err
		}
	}
	// The version is the one registered when the call was sent (weights are
	// swapped while the gateway is paused and drained).
	version := m.version.Load()
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
		IDs:              ch.TokenIDs,
		Model:            m.name,
		Version:          version,
		Retries:          retries,
		PromptTokens:     resp.Usage.PromptTokens,
		CompletionTokens: resp.Usage.CompletionTokens,
		MaxTokens:        w.MaxTokens,
		Raw:              out,
	}
	if clamped {
		r.MaxTokens = asked
		if room := m.maxContext - r.PromptTokens; r.PromptTokens > 0 && room < asked {
			r.MaxTokens = room
		}
	}
	ids := resp.PromptTokenIDs
	if ids.raw == nil {
		ids = ch.PromptTokenIDs
	}
	var nPrompt int
	if r.PromptIDsJSON, nPrompt, err = promptIDs(ids); err != nil {
		return nil, fmt.Errorf("upstream %s: decode answer: %w", m.name, err)
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
	if r.IDs == nil || r.PromptIDsJSON == nil {
		r.NoTokenIDs = true
		r.IDs, r.PromptIDsJSON, nPrompt = nil, nil, 0
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
		r.PromptTokens = nPrompt
	}
	if r.CompletionTokens == 0 {
		r.CompletionTokens = len(r.IDs)
	}
	return r, nil
}
