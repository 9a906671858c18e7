// Package proxy is agl's LLM gateway: the rollout-scoped OpenAI Chat
// Completions, Completions, Responses, Anthropic Messages and Gemini API
// routes a harness calls instead of its model provider.
//
// Every call is translated into agl's one conversation model (package chat),
// answered by a Backend (a token engine with a chat template, or an
// OpenAI-compatible vLLM/SGLang upstream), translated back into the caller's
// API shape (streaming or not), and recorded as one "model_request" event
// (api.ModelCall) with the exact prompt and response token ids. No byte of
// a call's answer is written before the store has made its event durable
// (store.EventRecorder where the store has one — SQLite's event journal —
// else AppendEvents, whose commit the store may share with concurrent
// calls: store.GroupCommit), so an answered call's event is exactly as
// durable as any other acknowledged write; a call whose event cannot be
// stored is answered with an error instead. (A streaming call whose answer
// took longer than StreamKeepAlive has sent headers and keep-alive comments
// before that; its content still follows the commit.)
//
// Routes, relative to the gateway root, authenticated by the attempt's
// scoped key (Authorization: Bearer KEY, or x-api-key: KEY):
//
//	POST /r/{rollout}/{attempt}/v1/chat/completions
//	POST /r/{rollout}/{attempt}/v1/completions
//	POST /r/{rollout}/{attempt}/v1/responses
//	POST /r/{rollout}/{attempt}/v1/messages       (Anthropic)
//	POST /r/{rollout}/{attempt}/v1/messages/count_tokens (token backends)
//	GET  /r/{rollout}/{attempt}/v1/models
//	POST /r/{rollout}/{attempt}/v1beta/models/{model}:generateContent       (Gemini)
//	POST /r/{rollout}/{attempt}/v1beta/models/{model}:streamGenerateContent (?alt=sse: SSE; else a JSON array)
//	POST /r/{rollout}/{attempt}/v1beta/models/{model}:countTokens           (token backends)
//	GET  /r/{rollout}/{attempt}/v1beta/models[/{model}]
//	POST /r/{rollout}/{attempt}/events            (harness rewards / custom events)
//
// Keys also arrive as the Gemini API sends them (x-goog-api-key, ?key=);
// a key given more than one way must be the same key. Errors come in the
// route's own shape (OpenAI, Anthropic or Google); an unknown route
// answers in the shape the request's headers and path point to
// (requestStyle).
//
// Every model route also answers under /r/{rollout}/{attempt}/agents/{agent}/
// (e.g. …/agents/writer/v1/chat/completions): the call is recorded for that
// agent of a multi-agent harness. A call names its agent, first match wins,
// by that path segment, by the X-Agl-Agent header, or by Config.Agents
// (requested model name → agent); else it is the default agent "". Agent
// names follow api.ValidAgentName (400 otherwise). Token state is kept per
// attempt and agent.
//
// ServeTrusted serves the same routes for callers the gateway authenticated
// itself.
package proxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/internal/fastjson"
	"github.com/aglrl/agl/store"
)

// ModeOverrides replace what the harness asked for, per rollout mode.
// Zero fields leave the request's value alone.
type ModeOverrides struct {
	// Model replaces the requested model name.
	Model string `json:"model,omitempty" yaml:"model,omitempty"`
	// Temperature and TopP replace the requested values.
	Temperature *float32 `json:"temperature,omitempty" yaml:"temperature,omitempty"`
	TopP        *float32 `json:"top_p,omitempty" yaml:"top_p,omitempty"`
	// MaxTokens replaces the requested response length bound.
	MaxTokens int `json:"max_tokens,omitempty" yaml:"max_tokens,omitempty"`
}

// Config tunes the proxy. Zero values take the documented defaults.
type Config struct {
	// Train and Val apply to rollouts of that mode.
	Train ModeOverrides `json:"train" yaml:"train"`
	Val   ModeOverrides `json:"val" yaml:"val"`
	// DefaultMaxTokens bounds a response when neither the request nor an
	// override does (0: up to the engine's context / upstream default).
	DefaultMaxTokens int `json:"default_max_tokens,omitempty" yaml:"default_max_tokens,omitempty"`
	// MaxBodyBytes bounds a request body (default 32 MiB).
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty" yaml:"max_body_bytes,omitempty"`
	// RequestTimeout bounds one call's backend work (default 10 minutes).
	RequestTimeout time.Duration `json:"request_timeout,omitempty" yaml:"request_timeout,omitempty"`
	// RetryAfter is the Retry-After sent while paused (default 1s).
	RetryAfter time.Duration `json:"retry_after,omitempty" yaml:"retry_after,omitempty"`
	// AuthCacheTTL is how long a verified scoped key is trusted without
	// asking the store again (default 1s; negative disables). An attempt
	// that ended meanwhile is still refused: the event append checks that
	// it is running, so such a call gets 409 (after the engine ran).
	AuthCacheTTL time.Duration `json:"auth_cache_ttl,omitempty" yaml:"auth_cache_ttl,omitempty"`
	// StreamKeepAlive: a streaming call whose answer takes longer than this
	// starts its stream (200, event-stream) and sends an SSE comment every
	// StreamKeepAlive until the answer is ready, so that clients with idle
	// timeouts do not give up on long generations; errors after that point
	// arrive as in-stream error events (default 15s; negative disables).
	StreamKeepAlive time.Duration `json:"stream_keep_alive,omitempty" yaml:"stream_keep_alive,omitempty"`
	// MaxAbsReward bounds |reward| of posted reward events (default
	// api.DefaultMaxAbsReward); set from the gateway section's
	// max_abs_reward, so that both event routes check the same bound.
	MaxAbsReward float64 `json:"-" yaml:"-"`
	// Agents maps a requested model name (before mode overrides) to the
	// agent a call is recorded for, when neither the path nor the
	// X-Agl-Agent header names one.
	Agents map[string]string `json:"agents,omitempty" yaml:"agents,omitempty"`
	// AttemptLimits caps the calls and generated tokens of one attempt.
	AttemptLimits AttemptLimits `json:"attempt_limits,omitempty" yaml:"attempt_limits,omitempty"`
	// StoredCallBytes and StoredAttemptBytes bound what a call, and all
	// calls of one attempt, may add to the store, measured on the stored
	// form (store/codec.go: against the attempt's previous call of the
	// same agent, so a long conversation's calls store only what is new).
	// A call over either bound is refused 413 in its route's error shape
	// and not recorded; the attempt goes on. Set from the gateway
	// section's max_stored_call_bytes / max_stored_attempt_bytes (defaults
	// DefaultStoredCallBytes, DefaultStoredAttemptBytes; negative: none).
	StoredCallBytes    int64 `json:"-" yaml:"-"`
	StoredAttemptBytes int64 `json:"-" yaml:"-"`
	// RolloutSeeds (set by agl train) seeds each call that names no seed
	// of its own from its rollout's metadata seed (see callSeed).
	RolloutSeeds bool `json:"-" yaml:"-"`
}

// AgentHeader names a call's agent (after the path segment, before
// Config.Agents).
const AgentHeader = "X-Agl-Agent"

// Validate reports a configuration the proxy cannot serve: an agent name
// in Agents that api.ValidAgentName refuses.
func (c Config) Validate() error {
	for model, agent := range c.Agents {
		if err := api.ValidAgentName(agent); err != nil {
			return fmt.Errorf("proxy.agents[%q]: %w", model, err)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 32 << 20
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Minute
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = time.Second
	}
	if c.AuthCacheTTL == 0 {
		c.AuthCacheTTL = time.Second
	}
	if c.StreamKeepAlive == 0 {
		c.StreamKeepAlive = 15 * time.Second
	}
	if c.StoredCallBytes == 0 {
		c.StoredCallBytes = DefaultStoredCallBytes
	}
	if c.StoredAttemptBytes == 0 {
		c.StoredAttemptBytes = DefaultStoredAttemptBytes
	}
	return c
}

// The default bounds of stored bytes per call and per attempt.
const (
	DefaultStoredCallBytes    = api.DefaultMaxStoredCallBytes
	DefaultStoredAttemptBytes = 256 << 20
)

// Proxy serves the rollout-scoped LLM routes. It is an http.Handler.
type Proxy struct {
	cfg     Config
	st      store.Store
	backend Backend

	idPrefix string
	seq      atomic.Uint64

	mu       sync.Mutex
	paused   bool
	inflight int
	idle     chan struct{} // closed when inflight drops to 0

	modesMu sync.RWMutex
	modes   map[string]store.Mode

	authMu sync.RWMutex
	auth   map[Target]authEntry

	usage usage // per-attempt calls and tokens (AttemptLimits), stored bytes
	// sizes holds the latest recorded call of each attempt and agent, to
	// measure a call's stored form (StoredCallBytes) before recording it.
	sizes *store.Bases
	seeds seeds // per-attempt sampling seeds (RolloutSeeds)
}

// New returns a proxy recording into st and answering with b.
// A TokenBackend behind it (directly or behind an AgentRouter) without a
// StateSource of its own continues token state from st's records of calls
// it did not serve (RecentCalls).
func New(cfg Config, st store.Store, b Backend) *Proxy {
	p := &Proxy{cfg: cfg.withDefaults(), st: st, backend: b, idPrefix: randSuffix(), modes: map[string]store.Mode{}, auth: map[Target]authEntry{},
		sizes: store.NewBases(sizesBytes)}
	if sb, ok := b.(stateSourced); ok {
		sb.useStateSource(p)
	}
	return p
}

// randSuffix returns 8 random base-36 characters.
func randSuffix() string {
	var b [8]byte
	rand.Read(b[:])
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	var out [8]byte
	x := binary.LittleEndian.Uint64(b[:])
	for i := range out {
		out[i] = digits[x%36]
		x /= 36
	}
	return string(out[:])
}

// newID returns a unique id with the given prefix ("chatcmpl-", "msg_", …).
func (p *Proxy) newID(prefix string) string {
	n := p.seq.Add(1)
	b := make([]byte, 0, len(prefix)+24)
	b = append(b, prefix...)
	b = append(b, p.idPrefix...)
	b = strconv.AppendUint(b, n, 36)
	return string(b)
}

// Pause makes new model calls fail with 503 and Retry-After; calls in
// flight finish. Events routes stay open.
func (p *Proxy) Pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

// Resume accepts model calls again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.paused = false
	p.mu.Unlock()
}

// Drain waits until no model call is in flight (pause first, or new calls
// may keep it busy) or ctx ends.
func (p *Proxy) Drain(ctx context.Context) error {
	p.mu.Lock()
	if p.inflight == 0 {
		p.mu.Unlock()
		return nil
	}
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	ch := p.idle
	p.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Status reports whether the proxy is paused and how many calls are in flight.
func (p *Proxy) Status() (paused bool, inflight int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.inflight
}

func (p *Proxy) admit() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		return false
	}
	p.inflight++
	return true
}

func (p *Proxy) release() {
	p.mu.Lock()
	p.inflight--
	if p.inflight == 0 && p.idle != nil {
		close(p.idle)
		p.idle = nil
	}
	p.mu.Unlock()
}

// apiShape binds one API's translation functions.
type apiShape struct {
	name     string // api.Shape*
	style    errorStyle
	idPrefix string // of the response id
	// decode parses c.body into c.chat or c.complete.
	decode func(p *Proxy, c *call) *apiError
	// encode builds the final (non-streaming) response object.
	encode func(p *Proxy, c *call) ([]byte, error)
	// stream appends the whole SSE stream for c to buf.
	stream func(p *Proxy, c *call, buf []byte) []byte
	// maxTokens names the response length parameter in errors.
	maxTokens string
	// prepare, if set, reads what the shape takes from the request's
	// path and query (Gemini: the model, the stream form).
	prepare func(c *call, r *http.Request) *apiError
	// array, if set, writes the answer of a call with arrayStream
	// (Gemini's streamGenerateContent without alt=sse).
	array func(p *Proxy, c *call, buf []byte) []byte
}

var (
	shapeChat      = &apiShape{name: api.ShapeChatCompletions, idPrefix: "chatcmpl-", style: styleOpenAI, decode: decodeChat, encode: encodeChat, stream: streamChat, maxTokens: "max_tokens"}
	shapeComplete  = &apiShape{name: api.ShapeCompletions, idPrefix: "cmpl-", style: styleOpenAI, decode: decodeCompletion, encode: encodeCompletion, stream: streamCompletion, maxTokens: "max_tokens"}
	shapeResponses = &apiShape{name: api.ShapeResponses, idPrefix: "resp_", style: styleOpenAI, decode: decodeResponses, encode: encodeResponses, stream: streamResponses, maxTokens: "max_output_tokens"}
	shapeMessages  = &apiShape{name: api.ShapeMessages, idPrefix: "msg_", style: styleAnthropic, decode: decodeMessages, encode: encodeMessages, stream: streamMessages, maxTokens: "max_tokens"}
	shapeGemini    = &apiShape{name: api.ShapeGenerateContent, idPrefix: "gen-", style: styleGoogle, decode: decodeGemini, encode: encodeGemini, stream: streamGemini, maxTokens: "generationConfig.maxOutputTokens", prepare: prepareGemini, array: arrayGemini}
)

// call is the state of one model call through the proxy.
type call struct {
	shape   *apiShape
	target  Target
	mode    store.Mode
	body    []byte
	start   time.Time
	id      string
	created int64

	stream       bool
	includeUsage bool
	// arrayStream: a stream answered as one JSON array (shape.array).
	arrayStream bool
	// pathModel is the model named by the path (Gemini).
	pathModel string

	chat     *ChatRequest
	complete *CompleteRequest
	// aux carries shape-specific request details to the encoder.
	aux any
	// countOnly: Anthropic count_tokens (max_tokens not required).
	countOnly bool
	// ignored lists what the request asked for that the model does not
	// get (api.ModelCall.Ignored).
	ignored []string
	// header is the request's header (for shape-specific headers).
	header http.Header
	// model is the requested model name before mode overrides (for
	// Config.Agents).
	model string

	res *Result
}

// ServeHTTP implements http.Handler for the routes in the package doc.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/r/")
	var rid, aid, sub string
	if ok {
		rid, rest, ok = strings.Cut(rest, "/")
	}
	if ok {
		aid, sub, ok = strings.Cut(rest, "/")
	}
	sub = strings.TrimSuffix(sub, "/")
	style := requestStyle(r, sub)
	if !ok || rid == "" || aid == "" {
		writeError(w, style, &apiError{Status: http.StatusNotFound, Message: "unknown route " + r.URL.Path})
		return
	}
	p.dispatch(w, r, Target{RolloutID: rid, AttemptID: aid}, sub, style)
}

// trustedKey marks a request context whose caller the gateway already
// authenticated (ServeTrusted).
type trustedKey struct{}

// ServeTrusted serves route ("v1/chat/completions", "v1/messages",
// "events", …: the part after /r/{rollout}/{attempt}/) for an attempt
// without checking a scoped key: for routes the gateway authenticates
// itself (e.g. Agent Lightning-compatible
// /proxy/rollout/{rid}/attempt/{aid}/mode/{mode}/openai/v1/… routes behind
// admin auth). The attempt must still be running for model calls.
func (p *Proxy) ServeTrusted(w http.ResponseWriter, r *http.Request, rolloutID, attemptID, route string) {
	route = strings.Trim(route, "/")
	style := requestStyle(r, route)
	r = r.WithContext(context.WithValue(r.Context(), trustedKey{}, true))
	p.dispatch(w, r, Target{RolloutID: rolloutID, AttemptID: attemptID}, route, style)
}

// requestStyle is the error shape a request is answered in before (or
// without) a route's own: Anthropic's for anthropic-version or
// anthropic-beta headers or a v1/messages route, Google's for an
// x-goog-api-key header or a v1beta/ route, else OpenAI's.
func requestStyle(r *http.Request, route string) errorStyle {
	if rest, ok := strings.CutPrefix(route, "agents/"); ok {
		_, route, _ = strings.Cut(rest, "/")
	}
	switch {
	case r.Header.Get("anthropic-version") != "" || r.Header.Get("anthropic-beta") != "":
		return styleAnthropic
	case r.Header.Get("X-Goog-Api-Key") != "" || strings.HasPrefix(route, "v1beta/") || route == "v1beta":
		return styleGoogle
	case strings.HasPrefix(route, "v1/messages"):
		return styleAnthropic
	}
	return styleOpenAI
}

func (p *Proxy) dispatch(w http.ResponseWriter, r *http.Request, t Target, sub string, style errorStyle) {
	if rest, ok := strings.CutPrefix(sub, "agents/"); ok {
		agent, route, _ := strings.Cut(rest, "/")
		if route == "events" || !strings.HasPrefix(route, "v1/") && !strings.HasPrefix(route, "v1beta/") {
			writeError(w, style, &apiError{Status: http.StatusNotFound, Message: "unknown route " + r.URL.Path + ": only model routes (v1/…) take an agent", Code: "unknown_url"})
			return
		}
		if err := api.ValidAgentName(agent); err != nil {
			writeError(w, style, badRequest("agent", "path segment agents/{agent}: %v", err))
			return
		}
		t.Agent, sub = agent, route
	}
	switch sub {
	case "v1/chat/completions":
		p.serveCall(w, r, t, shapeChat)
	case "v1/completions":
		p.serveCall(w, r, t, shapeComplete)
	case "v1/responses":
		p.serveCall(w, r, t, shapeResponses)
	case "v1/messages":
		p.serveCall(w, r, t, shapeMessages)
	case "v1/messages/count_tokens":
		p.serveCountTokens(w, r, t, shapeMessages)
	case "v1/models":
		p.serveModels(w, r, t)
	case "events":
		p.serveEvents(w, r, t)
	case "v1beta/models":
		p.serveGeminiModels(w, r, t, "")
	default:
		if model, ok := strings.CutPrefix(sub, "v1beta/models/"); ok && model != "" {
			model, method, colon := strings.Cut(model, ":")
			switch {
			case !colon && !strings.Contains(model, "/"):
				p.serveGeminiModels(w, r, t, model)
				return
			case method == "generateContent" || method == "streamGenerateContent":
				p.serveCall(w, r, t, shapeGemini)
				return
			case method == "countTokens":
				p.serveCountTokens(w, r, t, shapeGemini)
				return
			}
		}
		writeError(w, style, &apiError{Status: http.StatusNotFound, Message: "unknown route " + r.URL.Path, Code: "unknown_url"})
	}
}

// authorize checks the scoped key; with running, the attempt must be
// running. It returns the rollout's mode.
func (p *Proxy) authorize(ctx context.Context, r *http.Request, t Target, running bool) (store.Mode, *apiError) {
	if ctx.Value(trustedKey{}) != nil {
		return p.trustedAttempt(ctx, t, running)
	}
	key, err := requestKey(r)
	if err != nil {
		return "", &apiError{Status: http.StatusUnauthorized, Message: err.Error(), Code: "invalid_api_key"}
	}
	if key == "" {
		return "", &apiError{Status: http.StatusUnauthorized, Message: "missing API key: send the attempt's scoped key as Authorization: Bearer KEY, x-api-key or x-goog-api-key", Code: "invalid_api_key"}
	}
	sum := sha256.Sum256([]byte(key))
	if p.cfg.AuthCacheTTL > 0 {
		p.authMu.RLock()
		a, ok := p.auth[t.attempt()]
		p.authMu.RUnlock()
		if ok && !a.revoked && subtle.ConstantTimeCompare(a.sum[:], sum[:]) == 1 && time.Now().Before(a.until) {
			return a.mode, nil
		}
	}
	att, err := p.st.AttemptByKey(ctx, t.RolloutID, t.AttemptID, key)
	if err != nil {
		if errors.Is(err, store.ErrForbidden) || errors.Is(err, store.ErrNotFound) {
			return "", &apiError{Status: http.StatusUnauthorized, Message: "invalid API key for this rollout attempt", Code: "invalid_api_key"}
		}
		return "", &apiError{Status: http.StatusInternalServerError, Message: "authorize: " + err.Error()}
	}
	if running && att.Status != store.AttemptRunning {
		return "", &apiError{Status: http.StatusConflict, Message: "attempt " + t.AttemptID + " is " + string(att.Status) + ", not running", Code: "attempt_not_running"}
	}
	mode, err := p.rolloutMode(ctx, t.RolloutID)
	if err != nil {
		return "", &apiError{Status: http.StatusInternalServerError, Message: "rollout mode: " + err.Error()}
	}
	if p.cfg.AuthCacheTTL > 0 && att.Status == store.AttemptRunning {
		p.authMu.Lock()
		if len(p.auth) >= 1<<16 {
			clear(p.auth)
		}
		if !p.auth[t.attempt()].revoked {
			p.auth[t.attempt()] = authEntry{sum: sum, mode: mode, until: time.Now().Add(p.cfg.AuthCacheTTL)}
		}
		p.authMu.Unlock()
	}
	return mode, nil
}

// ForgetKey drops the cached verification of an attempt's scoped key, so
// that a key the store revoked is refused at once by this proxy (other
// replicas within AuthCacheTTL).
func (p *Proxy) ForgetKey(rolloutID, attemptID string) {
	p.authMu.Lock()
	p.auth[Target{RolloutID: rolloutID, AttemptID: attemptID}] = authEntry{revoked: true}
	p.authMu.Unlock()
	p.usage.forget(Target{RolloutID: rolloutID, AttemptID: attemptID})
	p.seeds.forget(Target{RolloutID: rolloutID, AttemptID: attemptID})
}

// trustedAttempt checks that the attempt exists (and runs) without a key.
func (p *Proxy) trustedAttempt(ctx context.Context, t Target, running bool) (store.Mode, *apiError) {
	ro, err := p.st.GetRollout(ctx, t.RolloutID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return "", &apiError{Status: http.StatusNotFound, Message: "rollout " + t.RolloutID + " not found"}
		}
		return "", &apiError{Status: http.StatusInternalServerError, Message: "get rollout: " + err.Error()}
	}
	for _, a := range ro.Attempts {
		if a.ID != t.AttemptID {
			continue
		}
		if running && a.Status != store.AttemptRunning {
			return "", &apiError{Status: http.StatusConflict, Message: "attempt " + t.AttemptID + " is " + string(a.Status) + ", not running", Code: "attempt_not_running"}
		}
		if ro.Mode == "" {
			return store.ModeTrain, nil
		}
		return ro.Mode, nil
	}
	return "", &apiError{Status: http.StatusNotFound, Message: "attempt " + t.AttemptID + " of rollout " + t.RolloutID + " not found"}
}

// authEntry remembers a verified scoped key (as its SHA-256) for a while.
type authEntry struct {
	sum   [sha256.Size]byte
	mode  store.Mode
	until time.Time
	// revoked marks a key ForgetKey dropped: not cached again (a check
	// that raced the revocation must not re-admit it).
	revoked bool
}

// rolloutMode returns (and caches: it never changes) a rollout's mode.
func (p *Proxy) rolloutMode(ctx context.Context, id string) (store.Mode, error) {
	p.modesMu.RLock()
	m, ok := p.modes[id]
	p.modesMu.RUnlock()
	if ok {
		return m, nil
	}
	ro, err := p.st.GetRollout(ctx, id)
	if err != nil {
		return "", err
	}
	m = ro.Mode
	if m == "" {
		m = store.ModeTrain
	}
	p.modesMu.Lock()
	if len(p.modes) >= 1<<16 {
		clear(p.modes)
	}
	p.modes[id] = m
	p.modesMu.Unlock()
	return m, nil
}

func (p *Proxy) overrides(m store.Mode) *ModeOverrides {
	if m == store.ModeVal {
		return &p.cfg.Val
	}
	return &p.cfg.Train
}

// readBody reads at most MaxBodyBytes.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if r.ContentLength > p.cfg.MaxBodyBytes {
		return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Message: "request body of " + strconv.FormatInt(r.ContentLength, 10) + " bytes exceeds the limit of " + strconv.FormatInt(p.cfg.MaxBodyBytes, 10), Code: "request_too_large"}
	}
	n := r.ContentLength
	if n < 0 || n > 1<<20 {
		n = 4096
	}
	buf := make([]byte, 0, n+1)
	lr := io.LimitReader(r.Body, p.cfg.MaxBodyBytes+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		k, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, bodyReadError(err, p.cfg.MaxBodyBytes)
		}
	}
	if int64(len(buf)) > p.cfg.MaxBodyBytes {
		return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Message: "request body exceeds the limit of " + strconv.FormatInt(p.cfg.MaxBodyBytes, 10) + " bytes", Code: "request_too_large"}
	}
	// The body is recorded in the call's event: text that is not UTF-8 is
	// refused here rather than stored and served back unparseable.
	if !utf8.Valid(buf) {
		return nil, badRequest("", "request body is not valid UTF-8 (at byte %d)", invalidUTF8At(buf))
	}
	return buf, nil
}

// invalidUTF8At returns the offset of the first byte of b that is not
// part of valid UTF-8.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// bodyReadError answers a failed body read: 413 past the gateway's body
// limit (an oversized chunked body), 408 when the body did not arrive
// before the read deadline, else 400.
func bodyReadError(err error, limit int64) *apiError {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Message: "request body exceeds the limit of " + strconv.FormatInt(min(limit, mb.Limit), 10) + " bytes", Code: "request_too_large"}
	}
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return &apiError{Status: http.StatusRequestTimeout, Message: "request body did not arrive in time", Code: "request_timeout"}
	}
	return &apiError{Status: http.StatusBadRequest, Message: "read body: " + err.Error()}
}

// applyOverrides fills defaults and mode overrides into s and the model;
// a negative response length is refused (0 means the default).
func (p *Proxy) applyOverrides(c *call, model *string, s *engine.Sampling, temperatureSet bool) *apiError {
	if s.MaxTokens < 0 {
		return badRequest(c.shape.maxTokens, "%s: must not be negative, got %d", c.shape.maxTokens, s.MaxTokens)
	}
	c.model = *model
	o := p.overrides(c.mode)
	if !temperatureSet {
		s.Temperature = 1
	}
	if o.Temperature != nil {
		s.Temperature = *o.Temperature
	}
	if o.TopP != nil {
		s.TopP = *o.TopP
	}
	if o.MaxTokens > 0 {
		s.MaxTokens = o.MaxTokens
	} else if s.MaxTokens == 0 {
		s.MaxTokens = p.cfg.DefaultMaxTokens
	}
	if o.Model != "" {
		*model = o.Model
	}
	return nil
}

func (p *Proxy) serveCall(w http.ResponseWriter, r *http.Request, t Target, sh *apiShape) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, sh.style, &apiError{Status: http.StatusMethodNotAllowed, Message: "use POST"})
		return
	}
	if !p.admit() {
		secs := int((p.cfg.RetryAfter + time.Second - 1) / time.Second)
		writeError(w, sh.style, &apiError{Status: http.StatusServiceUnavailable, Message: "the gateway is paused for a weight update; retry shortly", Code: "paused", RetryAfter: secs})
		return
	}
	defer p.release()
	c := &call{shape: sh, target: t, start: time.Now(), header: r.Header}
	ctx := r.Context()
	mode, aerr := p.authorize(ctx, r, t, true)
	if aerr != nil {
		writeError(w, sh.style, aerr)
		return
	}
	c.mode = mode
	if c.body, aerr = p.readBody(w, r); aerr != nil {
		writeError(w, sh.style, aerr)
		return
	}
	if sh.prepare != nil {
		if aerr = sh.prepare(c, r); aerr != nil {
			writeError(w, sh.style, aerr)
			return
		}
	}
	if aerr = sh.decode(p, c); aerr != nil {
		writeError(w, sh.style, aerr)
		return
	}
	if t.Agent == "" {
		if t.Agent = r.Header.Get(AgentHeader); t.Agent != "" {
			if err := api.ValidAgentName(t.Agent); err != nil {
				writeError(w, sh.style, badRequest("", "header %s: %v", AgentHeader, err))
				return
			}
		} else {
			t.Agent = p.cfg.Agents[c.model]
		}
	}
	c.target = t
	if aerr := p.usage.admit(p.cfg.AttemptLimits, t); aerr != nil {
		writeError(w, sh.style, aerr)
		return
	}
	if aerr := p.seedCall(ctx, c); aerr != nil {
		writeError(w, sh.style, aerr)
		return
	}
	c.created = c.start.Unix()
	c.id = p.newID(sh.idPrefix)

	var ka *keepAlive
	if c.stream && p.cfg.StreamKeepAlive > 0 {
		ka = startKeepAlive(w, p.cfg.StreamKeepAlive)
	}
	fail := func(e *apiError) {
		if ka.stop() {
			w.Write(appendSSEError(nil, sh.style, e))
			return
		}
		writeError(w, sh.style, e)
	}
	bctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	var err error
	if c.chat != nil {
		c.chat.Target = t
		c.res, err = p.backend.Chat(bctx, c.chat)
	} else {
		c.complete.Target = t
		c.res, err = p.backend.Complete(bctx, c.complete)
	}
	cancel()
	if err != nil {
		fail(backendError(err))
		return
	}
	p.usage.generated(p.cfg.AttemptLimits, t, len(c.res.ResponseIDs))
	if c.res.Model == "" {
		c.res.Model = p.backend.ModelName()
	}
	resp, err := sh.encode(p, c)
	if err != nil {
		fail(&apiError{Status: http.StatusInternalServerError, Message: "encode response: " + err.Error()})
		return
	}
	if aerr := p.record(ctx, c, resp); aerr != nil {
		fail(aerr)
		return
	}
	started := ka.stop()
	h := w.Header()
	if c.arrayStream {
		resp = sh.array(p, c, make([]byte, 0, 2*len(resp)+64))
	}
	if !c.stream {
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(resp)))
		w.Write(resp)
		return
	}
	if !started {
		setSSEHeaders(h)
	}
	out := sh.stream(p, c, make([]byte, 0, 2*len(resp)+512))
	w.Write(out)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func setSSEHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
}

// keepAlive sends SSE comments on a stream while its answer is computed.
type keepAlive struct {
	done    chan struct{}
	exited  chan struct{}
	started bool // the stream's headers were sent; read after exited
}

func startKeepAlive(w http.ResponseWriter, every time.Duration) *keepAlive {
	k := &keepAlive{done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(k.exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-k.done:
				return
			case <-t.C:
				if !k.started {
					setSSEHeaders(w.Header())
					w.WriteHeader(http.StatusOK)
					k.started = true
				}
				w.Write([]byte(": keep-alive\n\n"))
				if f, ok := w.(http.Flusher); ok {
					f.Flush()
				}
			}
		}
	}()
	return k
}

// stop ends the keep-alives (once; nil-safe) and reports whether the
// stream was started.
func (k *keepAlive) stop() bool {
	if k == nil {
		return false
	}
	select {
	case <-k.exited:
	default:
		close(k.done)
		<-k.exited
	}
	return k.started
}

// backendError maps a Backend error to an API error.
func backendError(err error) *apiError {
	var he *upstream.HTTPError
	switch {
	case errors.Is(err, ErrUnsupported):
		return &apiError{Status: http.StatusBadRequest, Message: err.Error(), Code: "unsupported_parameter"}
	case errors.Is(err, ErrBadRequest), errors.Is(err, engine.ErrInvalidPrompt):
		return &apiError{Status: http.StatusBadRequest, Message: err.Error()}
	case errors.As(err, &he) && he.Status >= 400 && he.Status < 500 && he.Status != http.StatusTooManyRequests && he.Status != http.StatusRequestTimeout:
		return &apiError{Status: he.Status, Message: "upstream: " + he.Message()}
	case errors.Is(err, upstream.ErrNoEndpoints):
		return &apiError{Status: http.StatusServiceUnavailable, Message: "model backend: " + err.Error() + " (register one: POST /api/models)", Code: "no_endpoints"}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: http.StatusGatewayTimeout, Message: "model call timed out: " + err.Error(), Code: "timeout"}
	case errors.Is(err, context.Canceled):
		return &apiError{Status: 499, Message: "request cancelled"}
	}
	return &apiError{Status: http.StatusBadGateway, Message: "model backend: " + err.Error(), Code: "backend_error"}
}

// eventData encodes the model_request event of c (an api.ModelCall) and
// sets lay to its layout.
func (c *call) eventData(resp []byte, lay *store.CallLayout) []byte {
	res := c.res
	var samp engine.Sampling
	switch {
	case res.Sampling != nil:
		samp = *res.Sampling
	case c.chat != nil:
		samp = c.chat.Sampling
	default:
		samp = c.complete.Sampling
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
	if c.chat != nil && res.Sampling != nil && c.chat.Sampling.MaxTokens > res.Sampling.MaxTokens {
		mc.Ignored = append(mc.Ignored, "max_tokens ("+strconv.Itoa(c.chat.Sampling.MaxTokens)+" clamped to "+strconv.Itoa(res.Sampling.MaxTokens)+", the room left in the context)")
	}
	mc.Sampling = appendSampling(make([]byte, 0, 96), &samp)
	return appendModelCall(make([]byte, 0, 512+len(c.body)+len(resp)+len(res.PromptIDsJSON)+12*(len(res.PromptIDs)+len(res.ResponseIDs))), &mc, res.PromptIDsJSON, lay)
}

// record appends the model_request event for c.
func (p *Proxy) record(ctx context.Context, c *call, resp []byte) *apiError {
	lay := new(store.CallLayout)
	data := c.eventData(resp, lay)
	// The event must land even if the client went away: it records tokens
	// the engine spent.
	ctx = context.WithoutCancel(ctx)
	evs := []store.NewEvent{{Type: store.EventModelRequest, Time: time.Now(), Data: data, DataValid: true, Layout: lay}}
	// The one place a call is refused for what it would store.
	b := p.sizes.Batch()
	enc := b.Encode(c.target.RolloutID, c.target.AttemptID, evs[0])
	if aerr := p.usage.store(p.cfg, c.target, int64(len(enc.Data))); aerr != nil {
		return aerr
	}
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

// TokenCounter is implemented by backends that can count the prompt tokens
// of a conversation (TokenBackend does); it serves Anthropic's
// /v1/messages/count_tokens and the Gemini API's :countTokens.
type TokenCounter interface {
	CountTokens(ctx context.Context, conv chat.Conversation) (int, error)
}

// serveCountTokens answers Anthropic's POST /v1/messages/count_tokens
// ({"input_tokens":N}) or the Gemini API's POST …:countTokens
// ({"totalTokens":N}), as sh says.
func (p *Proxy) serveCountTokens(w http.ResponseWriter, r *http.Request, t Target, sh *apiShape) {
	if r.Method != http.MethodPost {
		writeError(w, sh.style, &apiError{Status: http.StatusMethodNotAllowed, Message: "use POST"})
		return
	}
	tc, ok := p.backend.(TokenCounter)
	if !ok {
		writeError(w, sh.style, &apiError{Status: http.StatusNotFound, Message: "counting tokens is not supported by this model backend"})
		return
	}
	mode, aerr := p.authorize(r.Context(), r, t, false)
	if aerr != nil {
		writeError(w, sh.style, aerr)
		return
	}
	c := &call{shape: sh, target: t, mode: mode, countOnly: true, header: r.Header}
	if c.body, aerr = p.readBody(w, r); aerr != nil {
		writeError(w, sh.style, aerr)
		return
	}
	if sh.prepare != nil {
		if aerr = sh.prepare(c, r); aerr != nil {
			writeError(w, sh.style, aerr)
			return
		}
	}
	if aerr = sh.decode(p, c); aerr != nil {
		writeError(w, sh.style, aerr)
		return
	}
	n, err := tc.CountTokens(r.Context(), c.chat.Conv)
	if err != nil {
		writeError(w, sh.style, backendError(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	field := `{"input_tokens":`
	if sh == shapeGemini {
		field = `{"totalTokens":`
	}
	w.Write(strconv.AppendInt([]byte(field), int64(n), 10))
	w.Write([]byte("}"))
}

// serveModels answers GET /v1/models in OpenAI's or (with an
// anthropic-version header) Anthropic's list shape.
func (p *Proxy) serveModels(w http.ResponseWriter, r *http.Request, t Target) {
	style := styleOpenAI
	anth := r.Header.Get("anthropic-version") != ""
	if anth {
		style = styleAnthropic
	}
	if r.Method != http.MethodGet {
		writeError(w, style, &apiError{Status: http.StatusMethodNotAllowed, Message: "use GET"})
		return
	}
	mode, aerr := p.authorize(r.Context(), r, t, false)
	if aerr != nil {
		writeError(w, style, aerr)
		return
	}
	name := p.overrides(mode).Model
	if name == "" {
		name = p.backend.ModelName()
	}
	var b []byte
	if anth {
		b = append(b, `{"data":[{"type":"model","id":`...)
		b = fastjson.AppendString(b, name)
		b = append(b, `,"display_name":`...)
		b = fastjson.AppendString(b, name)
		b = append(b, `,"created_at":"1970-01-01T00:00:00Z"}],"has_more":false,"first_id":`...)
		b = fastjson.AppendString(b, name)
		b = append(b, `,"last_id":`...)
		b = fastjson.AppendString(b, name)
		b = append(b, '}')
	} else {
		b = append(b, `{"object":"list","data":[{"id":`...)
		b = fastjson.AppendString(b, name)
		b = append(b, `,"object":"model","created":0,"owned_by":"agl"}]}`...)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// maxHarnessEvents bounds one POST /events.
const maxHarnessEvents = store.MaxEventsPerRequest

// serveEvents appends harness-emitted events: one {"type","data","time"}
// object, an array of them, or {"events":[…]}, checked by api.CheckEvents:
// a scoped key may not forge gateway-owned events (model_request, span) or
// a reward's source (403), and rewards must be finite numbers within the
// configured bound (400).
func (p *Proxy) serveEvents(w http.ResponseWriter, r *http.Request, t Target) {
	if r.Method != http.MethodPost {
		writeError(w, styleOpenAI, &apiError{Status: http.StatusMethodNotAllowed, Message: "use POST"})
		return
	}
	if _, aerr := p.authorize(r.Context(), r, t, true); aerr != nil {
		writeError(w, styleOpenAI, aerr)
		return
	}
	body, aerr := p.readBody(w, r)
	if aerr != nil {
		writeError(w, styleOpenAI, aerr)
		return
	}
	evs, aerr := parseHarnessEvents(body, r.Context().Value(trustedKey{}) == nil, p.cfg.MaxAbsReward)
	if aerr != nil {
		writeError(w, styleOpenAI, aerr)
		return
	}
	stored, err := p.st.AppendEvents(r.Context(), t.RolloutID, t.AttemptID, evs)
	if err != nil {
		st := http.StatusInternalServerError
		switch {
		case errors.Is(err, store.ErrConflict):
			st = http.StatusConflict
		case errors.Is(err, store.ErrInvalid):
			st = http.StatusBadRequest
		case errors.Is(err, store.ErrNotFound):
			st = http.StatusNotFound
		}
		writeError(w, styleOpenAI, &apiError{Status: st, Message: "append events: " + err.Error()})
		return
	}
	b, err := json.Marshal(struct {
		Events []store.Event `json:"events"`
	}{stored})
	if err != nil {
		writeError(w, styleOpenAI, &apiError{Status: http.StatusInternalServerError, Message: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// parseHarnessEvents decodes and checks a POST /events body; harness is
// true for a caller with a scoped key (false behind ServeTrusted).
func parseHarnessEvents(body []byte, harness bool, maxAbsReward float64) ([]store.NewEvent, *apiError) {
	var evs []store.NewEvent
	trim := strings.TrimSpace(string(body))
	switch {
	case strings.HasPrefix(trim, "["):
		if err := json.Unmarshal(body, &evs); err != nil {
			return nil, badRequest("", "malformed JSON: %v", err)
		}
	case strings.HasPrefix(trim, "{"):
		var one struct {
			store.NewEvent
			Events []store.NewEvent `json:"events"`
		}
		if err := json.Unmarshal(body, &one); err != nil {
			return nil, badRequest("", "malformed JSON: %v", err)
		}
		if one.Events != nil {
			evs = one.Events
		} else {
			evs = []store.NewEvent{one.NewEvent}
		}
	default:
		return nil, badRequest("", "malformed JSON: expected an event object or an array of events")
	}
	if len(evs) == 0 {
		return nil, badRequest("events", "no events given")
	}
	if len(evs) > maxHarnessEvents {
		return nil, badRequest("events", "at most %d events per request", maxHarnessEvents)
	}
	if fe := api.CheckEvents(evs, harness, maxAbsReward); fe != nil {
		return nil, &apiError{Status: fe.Status, Message: fe.Error(), Param: fe.Field}
	}
	for i, e := range evs {
		if len(e.Data) == 0 {
			evs[i].Data = json.RawMessage("null")
		}
	}
	return evs, nil
}
