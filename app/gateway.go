package app

import (
	"cmp"
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/dashboard"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/metrics"
	"github.com/aglrl/agl/otlp"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/trainer"
)

// Options are what a command adds to the config.
type Options struct {
	Logger *slog.Logger
	// Version is agl's version, reported by /api/health.
	Version string
	// WarmStart (agl gateway, with policies) serves trained policies on
	// their model_dir's weights even when the data dir holds an agl train
	// checkpoint of them.
	WarmStart bool
	// Models, when set, are served instead of the config's engine or
	// policies.
	Models *Models
}

// Models are an LLM the caller built: an engine it runs itself, or a
// scripted one in tests.
type Models struct {
	Backend proxy.Backend
	// Format renders the dashboard's token view (nil: none).
	Format chat.Format
	// Policies are what agl train trains on the calls Backend answers.
	Policies []trainer.TrainedPolicy
}

// Stack is one config's store, metrics, LLM and gateway with every mount.
type Stack struct {
	Config Config
	// Store is the store every part writes through, its writes observed
	// by Metrics.
	Store   store.Store
	Metrics *metrics.Metrics
	// LLM serves the LLM routes; nil: none (they answer 404).
	LLM     *LLM
	Gateway *gateway.Server
	shared  store.Shared // the store's, nil when it has none
	log     *slog.Logger
	version string
}

// openStack opens the store of c, observed by the metrics: /metrics
// counts the events, model calls, reaper passes and trainer steps stored.
func openStack(ctx context.Context, c Config, o Options) (*Stack, error) {
	log := cmp.Or(o.Logger, slog.Default())
	m := metrics.New(metrics.Options{Runtime: true, CallsFromEvents: true})
	st, err := OpenStore(ctx, c.Config, log, m)
	if err != nil {
		return nil, err
	}
	m.CountRollouts(st)
	s := &Stack{Config: c, Store: st, Metrics: m, log: log, version: o.Version}
	// Replicas on one PostgreSQL share wake-ups and the pause state.
	s.shared, _ = st.(store.Shared)
	return s, nil
}

// OpenGateway opens what `agl gateway` serves: the store, the LLM of the
// config's policies or engine (nothing trains), and the gateway with
// every mount. Close it when done.
func OpenGateway(ctx context.Context, c Config, o Options) (*Stack, error) {
	set, err := c.checkServe()
	if err != nil {
		return nil, err
	}
	s, err := openStack(ctx, c, o)
	if err != nil {
		return nil, err
	}
	switch {
	case o.Models != nil:
		s.LLM = &LLM{Proxy: proxy.New(c.Proxy, s.Store, o.Models.Backend), Format: o.Models.Format}
	case set != nil:
		s.LLM, err = openPolicies(ctx, c, set, o.WarmStart, s.Store, s.log)
	default:
		s.LLM, err = OpenLLM(ctx, c, s.Store, s.log)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	if s.LLM == nil {
		s.log.Info("no engine configured: LLM routes answer 404 (set engine.model_dir or engine.upstream)")
	}
	s.mount(ctx, c.Gateway.AdminKey)
	return s, nil
}

// mount builds the gateway with every mount: the store API and /r, the
// LLM routes of s.LLM, /al (the al: section), OTLP, the dashboard and
// /metrics; an upstream engine's routing table follows the model
// registry. ctx bounds the watchers it starts.
func (s *Stack) mount(ctx context.Context, adminKey string) {
	g := s.Config.Gateway
	opt := gateway.Options{Store: s.Store, AdminKey: adminKey, MaxBodyBytes: g.MaxBodyBytes,
		ReapInterval: g.ReapInterval, MaxAbsReward: g.MaxAbsReward, Logger: s.log, Version: s.version, Wrap: s.Metrics.Middleware,
		Limits: limits(g), WaitPoll: g.WaitPoll, Shared: s.shared}
	l := s.LLM
	if l != nil {
		opt.LLM = l.Proxy
		if l.Upstream != nil {
			// The routing table follows the model registry: at once for a
			// registration through this gateway, by polling for the others.
			ms := proxy.NewModelSync(s.Store, l.Upstream, s.log)
			ms.Changed(ctx)
			opt.ModelsChanged = ms.Changed
			go ms.Run(ctx, l.ModelSync)
			if opt.Shared != nil {
				go syncOnChanges(ctx, opt.Shared, ms)
			}
		}
	}
	srv := gateway.New(opt)
	srv.Handle("GET /metrics", s.Metrics.Handler())
	mountAL(ctx, s.Config, srv, s.Store, s.shared, l, opt.ModelsChanged, s.log)
	var tok dashboard.Decoder
	var toks map[string]dashboard.Decoder
	if l != nil && l.Format != nil {
		tok, toks = l.Format.Tokenizer(), l.tokenizers
	}
	dashboard.New(dashboard.Options{Store: s.Store, AdminKey: adminKey, Status: srv.Status, Tokenizer: tok, Tokenizers: toks, Logger: s.log}).Register(srv.Handle)
	otlp.Mount(srv, otlp.NewHandler(s.Store, otlp.WithAuthorize(srv.IsAdmin), otlp.WithObserver(s.Metrics.ObserveSpans), otlp.WithLogger(s.log)))
	s.Gateway = srv
}

// ListenAndServe serves the gateway on addr (gateway.listen when "",
// else config.DefaultListen) until ctx ends, then drains for
// gateway.drain_timeout. ready, if not nil, gets the bound address.
func (s *Stack) ListenAndServe(ctx context.Context, addr string, ready func(net.Addr)) error {
	if s.Config.Gateway.AdminKey == "" {
		s.log.Warn("no admin key set: the API is open to anyone on this machine, so the gateway listens on loopback only (set AGL_ADMIN_KEY to listen elsewhere)")
	}
	addr = cmp.Or(addr, s.Config.Gateway.Listen, config.DefaultListen)
	return s.Gateway.ListenAndServe(ctx, addr, s.Config.Gateway.DrainTimeout, ready)
}

// Where names the store for logs, without a password.
func (s *Stack) Where() string {
	if p, ok := s.Config.StorePath(); ok {
		return p
	}
	return RedactURL(s.Config.Store.URL)
}

// Close closes the LLM's engines and the store.
func (s *Stack) Close() error {
	if s.LLM != nil {
		s.LLM.Close()
	}
	return s.Store.Close()
}

// syncOnChanges re-reads the model registry when a replica commits a
// change (registrations among them), at most every 100ms, so that a model
// registered through another replica routes here without waiting for the
// registry poll.
func syncOnChanges(ctx context.Context, sh store.Shared, ms *proxy.ModelSync) {
	ch := sh.Changed()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
		ch = sh.Changed()
		ms.Changed(ctx)
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// limits maps the config's client limits onto the gateway's.
func limits(g config.Gateway) gateway.Limits {
	return gateway.Limits{ReadHeaderTimeout: g.ReadHeaderTimeout, ReadBodyTimeout: g.ReadBodyTimeout, WriteTimeout: g.WriteTimeout,
		IdleTimeout: g.IdleTimeout, MaxHeaderBytes: g.MaxHeaderBytes, MaxConns: g.MaxConns, MaxConnsPerIP: g.MaxConnsPerIP}
}
