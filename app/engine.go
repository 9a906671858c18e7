package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/dashboard"
	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/model"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// EngineConfig is the `engine:` config section: what generates tokens.
// Exactly one of ModelDir (the embedded model) and Upstream (vLLM/SGLang
// OpenAI-compatible servers) may be set; neither serves no LLM routes.
type EngineConfig struct {
	// ModelDir holds config.json, model.safetensors, tokenizer.json.
	ModelDir string `yaml:"model_dir"`
	// Backend is the GoMLX backend for generation and training ("": the
	// pure-Go one, model.DefaultBackend and model.TrainBackend; "xla:cuda").
	Backend  string `yaml:"backend"`
	Name     string `yaml:"name"`
	MaxBatch int    `yaml:"max_batch"`
	// MaxContext bounds prompt+response tokens of the embedded model
	// (default: the model's max_position_embeddings, lowered to what a KV
	// cache of half the available memory holds).
	MaxContext int `yaml:"max_context"`
	// Version is the weights version the model dir holds (default 1).
	Version  int64            `yaml:"version"`
	Upstream *UpstreamSection `yaml:"upstream"`
}

// EngineOptions are the embedded engine's options from the config.
func (ec EngineConfig) EngineOptions(name string) model.EngineOptions {
	return model.EngineOptions{Name: name, MaxBatch: ec.MaxBatch, MaxContext: ec.MaxContext}
}

// logContext prints the embedded engine's context length and KV cache size.
func logContext(log *slog.Logger, eng *model.Engine) {
	ci := eng.Context()
	args := []any{"max_context", ci.MaxContext, "from", ci.Source, "kv_cache_mib", ci.KVCacheBytes >> 20}
	if ci.Note != "" {
		args = append(args, "note", ci.Note)
	}
	log.Info("embedded engine context", args...)
}

// LLM is what serving a model needs: the proxy and, for the embedded
// model, the engine (so a trainer can swap its weights).
type LLM struct {
	Proxy  *proxy.Proxy
	Engine *model.Engine // nil for upstreams
	// engines are the policies' embedded engines (policies:), closed with
	// Close.
	engines []*model.Engine
	// tokenizers decode each policy's calls in the dashboard (policies:).
	tokenizers map[string]dashboard.Decoder
	Format     chat.Format // nil for upstreams in chat mode
	// Upstream is the upstream client (nil for the embedded model), whose
	// routing table follows the model registry (proxy.ModelSync).
	Upstream *upstream.Client
	// ModelSync is how often the registry is re-read (engine.upstream.registry_poll).
	ModelSync time.Duration
}

// Close closes the embedded engines.
func (l *LLM) Close() {
	if l.Engine != nil {
		l.Engine.Close()
	}
	for _, e := range l.engines {
		e.Close()
	}
}

// OpenLLM builds the proxy for the configured engine, or nil when none is.
func OpenLLM(ctx context.Context, c Config, st store.Store, log *slog.Logger) (*LLM, error) {
	ec, pc := c.Engine, c.Proxy
	if err := pc.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	switch {
	case ec.ModelDir != "" && ec.Upstream != nil:
		return nil, fmt.Errorf("config engine: set model_dir or upstream, not both")
	case ec.ModelDir != "":
		f, err := chat.LoadDir(ec.ModelDir)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		if ec.Version == 0 {
			ec.Version = 1
		}
		eng, err := model.OpenEngine(ec.ModelDir, ec.Backend, ec.Version, ec.EngineOptions(ec.Name))
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		log.Info("embedded model loaded", "dir", ec.ModelDir, "name", eng.ModelName(), "version", ec.Version)
		logContext(log, eng)
		return &LLM{Proxy: proxy.New(pc, st, proxy.NewTokenBackend(eng, f, f.Tokenizer(), 0)), Engine: eng, Format: f}, nil
	case ec.Upstream != nil:
		cl, err := upstream.New(ec.Upstream.Config)
		if err != nil {
			return nil, fmt.Errorf("engine upstream: %w", err)
		}
		l := &LLM{Upstream: cl, ModelSync: ec.Upstream.RegistryPoll}
		m := ec.Upstream.Models[0]
		switch m.EffectiveMode() {
		case upstream.ModeToken:
			f, err := chat.LoadDir(m.TokenizerDir)
			if err != nil {
				return nil, fmt.Errorf("engine upstream: model %q: tokenizer_dir: %w", m.Name, err)
			}
			l.Format = f
			l.Proxy = proxy.New(pc, st, proxy.NewTokenBackend(upstream.NewTokenEngine(cl, m.Name, m.MaxContext), f, f.Tokenizer(), 0))
		default:
			l.Proxy = proxy.New(pc, st, proxy.NewUpstreamBackend(cl))
		}
		log.Info("upstream engine", "model", m.Name, "mode", m.EffectiveMode(), "endpoints", len(m.Endpoints), "version", m.Version)
		if len(m.Endpoints) == 0 {
			log.Warn("upstream model has no endpoints yet: calls answer 503 until one is registered (POST /api/models)", "model", m.Name)
		}
		return l, nil
	}
	return nil, nil
}

// UpstreamSection is the `engine.upstream` section: upstream.Config and
// how often the model registry is re-read for the live routing table.
type UpstreamSection struct {
	upstream.Config `yaml:",inline"`
	// RegistryPoll is how often the model registry is re-read (default
	// proxy.DefaultModelSync; a registration through this gateway applies
	// at once).
	RegistryPoll time.Duration `yaml:"registry_poll"`
}
