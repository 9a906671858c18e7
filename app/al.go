package app

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/gateway/al"
	"github.com/aglrl/agl/store"
)

// mountAL serves Agent Lightning v1.0's gateway API (the config's `al:`
// section) on srv. shared is the store's store.Shared, if any; l may be
// nil (no engine: the agent route answers 503).
func mountAL(ctx context.Context, c Config, srv *gateway.Server, st store.Store, shared store.Shared, l *LLM, changed func(context.Context), log *slog.Logger) {
	ac := c.AL
	if !ac.Enabled() {
		return
	}
	opt := al.Options{Config: ac, Store: st, IsAdmin: srv.IsAdmin, MaxAbsReward: c.Gateway.MaxAbsReward, MaxEventBytes: c.Gateway.MaxStoredCallBytes, Notify: srv.Notify, ModelsChanged: changed, Logger: log}
	opt.Late, _ = st.(store.LateWriter)
	opt.Shared = shared
	opt.WaitPoll = c.Gateway.WaitPoll
	if l != nil {
		opt.LLM = l.Proxy
		opt.DefaultModel = l.Proxy.ModelName()
	}
	h := al.New(opt)
	go h.Watch(ctx)
	srv.Handle(h.Prefix()+"/", http.StripPrefix(h.Prefix(), h))
}
