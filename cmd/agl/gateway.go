package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/dashboard"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/metrics"
	"github.com/aglrl/agl/otlp"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/postgres"
	"github.com/aglrl/agl/store/sqlite"
)

// configFlags registers the flags every server command shares and returns a
// function that loads the config once the flags are parsed.
func configFlags(fs *flag.FlagSet) func() (config.Config, error) {
	path := fs.String("config", "", "YAML config file")
	dataDir := fs.String("data-dir", "", "data directory (default .agl; env AGL_DATA_DIR)")
	storeURL := fs.String("store", "", "store URL: sqlite:PATH or postgres://… (default: SQLite in the data dir; env AGL_STORE_URL)")
	return func() (config.Config, error) {
		c, err := config.Load(*path)
		if err != nil {
			return c, err
		}
		if *dataDir != "" {
			c.DataDir = *dataDir
		}
		if *storeURL != "" {
			c.Store.URL = *storeURL
		}
		return c, nil
	}
}

// openStore opens the configured store backend for writing: a SQLite
// store holds its data dir's lock until closed (one writer per data dir).
func openStore(ctx context.Context, c config.Config) (store.Store, error) {
	if p, ok := c.StorePath(); ok {
		return sqlite.Open(ctx, p, sqlite.Options{Synchronous: c.Store.Synchronous, Logger: newLogger()})
	}
	u := c.Store.URL
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		return postgres.Open(ctx, u)
	}
	return nil, fmt.Errorf("store URL %q: want sqlite:PATH or postgres://…", redactURL(u))
}

// openReadStore opens the configured store for a command that only
// reads: SQLite read-only, beside a gateway or trainer that may be
// writing the same data dir, without taking its lock or touching its
// event journal. It says so on stderr when the journal holds events not
// yet in the database (which such a reader does not see).
func openReadStore(ctx context.Context, c config.Config, cmd string, stderr io.Writer) (store.Store, error) {
	p, ok := c.StorePath()
	if !ok {
		return openStore(ctx, c)
	}
	st, err := sqlite.Open(ctx, p, sqlite.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	n, err := st.JournalBacklog(ctx)
	if err != nil {
		st.Close()
		return nil, err
	}
	if n > 0 {
		fmt.Fprintf(stderr, "agl %s: read %s read-only, leaving its event journal to its writer; the journal holds %d bytes of events not yet in the database, which this read does not see (a running gateway applies them within milliseconds, a stopped one when it starts again)\n", cmd, p, n)
	}
	return st, nil
}

// redactURL hides a password in a URL for messages.
func redactURL(u string) string {
	if at := strings.LastIndex(u, "@"); at > 0 {
		if i := strings.Index(u, "://"); i > 0 && i < at {
			return u[:i+3] + "…" + u[at:]
		}
	}
	return u
}

// gatewayLimits maps the config's client limits onto the gateway's.
func gatewayLimits(g config.Gateway) gateway.Limits {
	return gateway.Limits{ReadHeaderTimeout: g.ReadHeaderTimeout, ReadBodyTimeout: g.ReadBodyTimeout, WriteTimeout: g.WriteTimeout,
		IdleTimeout: g.IdleTimeout, MaxHeaderBytes: g.MaxHeaderBytes, MaxConns: g.MaxConns, MaxConnsPerIP: g.MaxConnsPerIP}
}

func newLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func runGateway(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	load := configFlags(fs)
	listen := fs.String("listen", "", "address to listen on (default 127.0.0.1:8080; env AGL_LISTEN)")
	adminKey := fs.String("admin-key", "", "admin key guarding the API (env AGL_ADMIN_KEY; prefer the env var: flags show in ps)")
	warmStart := fs.Bool("warm-start", false, "with policies: serve trained policies on their model_dir's weights even when the data dir holds an agl train checkpoint of them")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	c, err := load()
	if err != nil {
		return err
	}
	if *listen != "" {
		c.Gateway.Listen = *listen
	}
	if *adminKey != "" {
		c.Gateway.AdminKey = *adminKey
	}
	log := newLogger()
	st, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer st.Close()
	// The proxy gets the wrapped store, so that /metrics counts the model
	// calls from the events it appends (the wrapper keeps the store's
	// event journal).
	m := metrics.New(metrics.Options{Store: st, Runtime: true, CallsFromEvents: true})
	raw := st
	st = m.WrapStore(st)
	l, err := openPolicies(ctx, c, filepath.Dir(fs.Lookup("config").Value.String()), *warmStart, st, log)
	if err == nil && l == nil {
		l, err = openLLM(ctx, c, st, log)
	}
	if err != nil {
		return err
	}
	opt := gateway.Options{Store: st, AdminKey: c.Gateway.AdminKey, MaxBodyBytes: c.Gateway.MaxBodyBytes,
		ReapInterval: c.Gateway.ReapInterval, MaxAbsReward: c.Gateway.MaxAbsReward, Logger: log, Version: version(), Wrap: m.Middleware, Limits: gatewayLimits(c.Gateway),
		WaitPoll: c.Gateway.WaitPoll}
	// Replicas on one PostgreSQL share wake-ups and the pause state.
	opt.Shared, _ = raw.(store.Shared)
	if l != nil {
		opt.LLM = l.Proxy
		defer l.close()
		if l.Upstream != nil {
			// The routing table follows the model registry: at once for a
			// registration through this gateway, by polling for the others.
			ms := proxy.NewModelSync(st, l.Upstream, log)
			ms.Changed(ctx)
			opt.ModelsChanged = ms.Changed
			go ms.Run(ctx, l.ModelSync)
			if opt.Shared != nil {
				go syncOnChanges(ctx, opt.Shared, ms)
			}
		}
	} else {
		log.Info("no engine configured: LLM routes answer 404 (set engine.model_dir or engine.upstream)")
	}
	srv := gateway.New(opt)
	srv.Handle("GET /metrics", m.Handler())
	if err := mountAL(ctx, c, srv, st, raw, l, opt.ModelsChanged, log); err != nil {
		return err
	}
	var tok dashboard.Decoder
	var toks map[string]dashboard.Decoder
	if l != nil && l.Format != nil {
		tok, toks = l.Format.Tokenizer(), l.tokenizers
	}
	dashboard.New(dashboard.Options{Store: st, AdminKey: c.Gateway.AdminKey, Status: srv.Status, Tokenizer: tok, Tokenizers: toks, Logger: log}).Register(srv.Handle)
	otlp.Mount(srv, otlp.NewHandler(st, otlp.WithAuthorize(srv.IsAdmin), otlp.WithObserver(m.ObserveSpans), otlp.WithLogger(log)))
	if c.Gateway.AdminKey == "" {
		log.Warn("no admin key set: the API is open to anyone on this machine, so the gateway listens on loopback only (set AGL_ADMIN_KEY to listen elsewhere)")
	}
	return srv.ListenAndServe(ctx, c.Gateway.Listen, c.Gateway.DrainTimeout, func(a net.Addr) {
		where, _ := c.StorePath()
		if where == "" {
			where = redactURL(c.Store.URL)
		}
		log.Info("gateway listening", "addr", "http://"+a.String(), "store", where, "version", version())
		fmt.Fprintf(stdout, "agl gateway listening on http://%s (dashboard at /)\n", a)
	})
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
