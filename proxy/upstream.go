package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/store"
)

// UpstreamBackend serves calls from OpenAI-compatible servers (vLLM,
// SGLang) through an upstream.Client in chat mode: the upstream renders
// the chat template itself and re-tokenizes the whole conversation every
// call, so events carry the ids it reports (upstream_rendered, render
// reason "upstream_rendered"), or no_token_ids when it reports none. For
// models agl can render, token mode avoids that: a TokenBackend over
// upstream.NewTokenEngine.
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

// fromUpstream converts r, the answer to a call sent with s.
func fromUpstream(r *upstream.Result, s engine.Sampling) *Result {
	res := &Result{
		Message: r.Message, Text: r.Text,
		PromptIDsJSON: r.PromptIDsJSON, ResponseIDs: r.IDs, Logprobs: r.Logprobs, NoTokenIDs: r.NoTokenIDs,
		FinishReason: r.FinishReason, Model: r.Model, ModelVersion: r.Version,
		RenderReason: ReasonUpstream, Retries: r.Retries,
		PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens,
		Raw: r.Raw,
	}
	if r.MaxTokens != s.MaxTokens {
		// Clamped to the model's context.
		s.MaxTokens = r.MaxTokens
		res.Sampling = &s
	}
	return res
}

// Chat implements Backend.
func (b *UpstreamBackend) Chat(ctx context.Context, req *ChatRequest) (*Result, error) {
	_, body := verbatim(ctx)
	r, err := b.c.Chat(ctx, upstream.ChatRequest{Model: req.Model, Sticky: req.Target.RolloutID, Conv: req.Conv, Sampling: req.Sampling, Stop: req.Stop, Body: body})
	if err != nil {
		return nil, err
	}
	res := fromUpstream(r, req.Sampling)
	res.UpstreamRendered = true
	// Tool call ids are the gateway's to give in the caller's id style.
	for i := range res.Message.ToolCalls {
		res.Message.ToolCalls[i].ID = req.ToolIDPrefix + b.tag + strconv.FormatUint(b.ids.Add(1), 36)
	}
	return res, nil
}

// Complete implements Backend.
func (b *UpstreamBackend) Complete(ctx context.Context, req *CompleteRequest) (*Result, error) {
	_, body := verbatim(ctx)
	cr := upstream.CompletionRequest{Model: req.Model, Sticky: req.Target.RolloutID, Sampling: req.Sampling, Stop: req.Stop, Body: body}
	if req.IDsGiven {
		cr.PromptIDs = req.PromptIDs
	} else {
		cr.Prompt = req.Prompt
	}
	r, err := b.c.Completion(ctx, cr)
	if err != nil {
		return nil, err
	}
	res := fromUpstream(r, req.Sampling)
	res.RenderReason = ReasonRawPrompt
	return res, nil
}

// ModelSync applies the store's model registry (POST /api/models, Agent
// Lightning's /al/api/models, the trainer's registrations) to an upstream
// client's live routing table: per model name, the highest registered
// version becomes the version events record (and so what staleness is
// computed from), and its endpoints become the model's endpoints, exactly
// (none: calls answer 503, as after Agent Lightning's DELETE
// /api/models), once any version of the name has listed endpoints; a name
// whose versions never listed any (a trainer's weight registrations)
// keeps its configured endpoints. A registered name the client does not
// serve is added only when it has endpoints. Syncs are serialized, so an
// older read never overwrites a newer one.
type ModelSync struct {
	st  store.Store
	c   *upstream.Client
	log *slog.Logger
	mu  sync.Mutex
}

// NewModelSync syncs c from st's registry.
func NewModelSync(st store.Store, c *upstream.Client, log *slog.Logger) *ModelSync {
	if log == nil {
		log = slog.Default()
	}
	return &ModelSync{st: st, c: c, log: log}
}

// Sync reads the registry and applies it once.
func (s *ModelSync) Sync(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms, err := s.st.ListModels(ctx, "")
	if err != nil {
		return fmt.Errorf("sync models: %w", err)
	}
	type latest struct {
		version int64
		eps     []string // of the newest version
		anyEps  bool     // some version listed endpoints
	}
	by := map[string]*latest{}
	for _, m := range ms {
		l := by[m.Name]
		if l == nil {
			l = &latest{version: -1}
			by[m.Name] = l
		}
		if m.Version > l.version {
			l.version, l.eps = m.Version, m.Endpoints
		}
		l.anyEps = l.anyEps || len(m.Endpoints) > 0
	}
	served := map[string]bool{}
	for _, mi := range s.c.Models() {
		served[mi.Name] = true
	}
	var errs []error
	for name, l := range by {
		if !served[name] && len(l.eps) == 0 {
			continue
		}
		var eps []string // nil: keep the configured ones
		if l.anyEps {
			eps = append([]string{}, l.eps...)
		}
		if err := s.c.Update(name, l.version, eps); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("sync models: %w", errors.Join(errs...))
	}
	return nil
}

// Changed is the gateway's hook for a registration through it
// (gateway.Options.ModelsChanged): it syncs before the registration is
// answered, so that the next call is routed by it.
func (s *ModelSync) Changed(ctx context.Context) {
	if err := s.Sync(ctx); err != nil {
		s.log.Warn("model registry not applied to the upstream routing table", "err", err)
	}
}

// Run syncs every interval (registrations by other gateway replicas
// sharing the store, or written to the store directly) until ctx ends.
// Failures are logged, once per distinct message.
func (s *ModelSync) Run(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultModelSync
	}
	t := time.NewTicker(every)
	defer t.Stop()
	last := ""
	for {
		err := s.Sync(ctx)
		switch {
		case err != nil && ctx.Err() == nil && err.Error() != last:
			last = err.Error()
			s.log.Warn("model registry not applied to the upstream routing table", "err", err)
		case err == nil && last != "":
			last = ""
			s.log.Info("model registry applied to the upstream routing table again")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// DefaultModelSync is how often ModelSync.Run re-reads the registry.
const DefaultModelSync = 2 * time.Second
