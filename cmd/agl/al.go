package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/gateway/al"
	"github.com/aglrl/agl/store"
)

// mountAL serves Agent Lightning v1.0's gateway API (the config's `al:`
// section) on srv. raw is the store before any wrapping (for store.Shared,
// which the metrics wrapper does not keep); l may be nil (no engine: the agent route answers 503).
func mountAL(ctx context.Context, c config.Config, srv *gateway.Server, st, raw store.Store, l *llm, changed func(context.Context), log *slog.Logger) error {
	var ac al.Config
	if err := c.Section("al", &ac); err != nil {
		return err
	}
	if !ac.Enabled() {
		return nil
	}
	opt := al.Options{Config: ac, Store: st, IsAdmin: srv.IsAdmin, MaxAbsReward: c.Gateway.MaxAbsReward, MaxEventBytes: c.Gateway.MaxStoredCallBytes, Notify: srv.Notify, ModelsChanged: changed, Logger: log}
	opt.Late, _ = st.(store.LateWriter)
	opt.Shared, _ = raw.(store.Shared)
	opt.WaitPoll = c.Gateway.WaitPoll
	if l != nil {
		opt.LLM = l.Proxy
		opt.DefaultModel = l.Proxy.ModelName()
	}
	h := al.New(opt)
	go h.Watch(ctx)
	srv.Handle(h.Prefix()+"/", http.StripPrefix(h.Prefix(), h))
	return nil
}
