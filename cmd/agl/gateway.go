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

	"github.com/aglrl/agl/app"
	"github.com/aglrl/agl/config"
)

// configFlags registers the flags every server command shares and returns a
// function that loads the config once the flags are parsed.
func configFlags(fs *flag.FlagSet) func() (app.Config, error) {
	path := fs.String("config", "", "YAML config file")
	dataDir := fs.String("data-dir", "", "data directory (default .agl; env AGL_DATA_DIR)")
	storeURL := fs.String("store", "", "store URL: sqlite:PATH or postgres://… (default: SQLite in the data dir; env AGL_STORE_URL)")
	return func() (app.Config, error) {
		c, err := config.Load(*path)
		if err != nil {
			return app.Config{}, err
		}
		if *dataDir != "" {
			c.DataDir = *dataDir
		}
		if *storeURL != "" {
			c.Store.URL = *storeURL
		}
		base := ""
		if *path != "" {
			base = filepath.Dir(*path)
		}
		ac, err := app.Decode(c, base)
		ac.Path = *path
		return ac, err
	}
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
	if *adminKey != "" {
		c.Gateway.AdminKey = *adminKey
	}
	log := newLogger()
	s, err := app.OpenGateway(ctx, c, app.Options{Logger: log, Version: version(), WarmStart: *warmStart})
	if err != nil {
		return err
	}
	defer s.Close()
	return s.ListenAndServe(ctx, *listen, func(a net.Addr) {
		log.Info("gateway listening", "addr", "http://"+a.String(), "store", s.Where(), "version", version())
		fmt.Fprintf(stdout, "agl gateway listening on http://%s (dashboard at /)\n", a)
	})
}
