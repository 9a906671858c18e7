package proxy

import (
	"fmt"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/engine"
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

func (p *Proxy) overrides(m store.Mode) *ModeOverrides {
	if m == store.ModeVal {
		return &p.cfg.Val
	}
	return &p.cfg.Train
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
