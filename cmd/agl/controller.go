package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/store"
)

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// runController is `agl controller [flags] -- HARNESS ARGS…`: it claims
// rollouts from a gateway and runs the harness once per attempt.
func runController(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agl controller [flags] -- HARNESS [ARGS…]\n\nClaims rollouts from a gateway and runs the harness once per attempt\n(the admin key comes from AGL_ADMIN_KEY).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	client := clientFlags(fs)
	concurrency := fs.Int("concurrency", 1, "attempts run at once")
	dir := fs.String("dir", "", "harness working directory (default: the current one)")
	var env multiFlag
	fs.Var(&env, "env", "extra KEY=VALUE for the harness (repeatable)")
	worker := fs.String("worker", "", "worker id (default host-pid)")
	mode := fs.String("mode", "", "claim only rollouts of this mode (train or val)")
	evaluator := fs.String("evaluator", "", "shell command run after a harness that reported no reward; its stdout is the reward")
	heartbeat := fs.Duration("heartbeat", 0, "heartbeat interval (default 10s)")
	poll := fs.Duration("poll", 0, "wait when nothing is queued (default 500ms)")
	logTail := fs.Int("log-tail", 0, "bytes of stdout/stderr kept per attempt (default 4096)")
	grace := fs.Duration("kill-grace", 0, "wait between SIGTERM and SIGKILL (default 5s)")
	verbose := fs.Bool("v", false, "log each attempt")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("controller: want the harness command after --")
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	c := client()
	cfg := controller.Config{
		GatewayURL:        c.BaseURL,
		AdminKey:          c.Key,
		Command:           fs.Args(),
		Dir:               *dir,
		Env:               env,
		Concurrency:       *concurrency,
		WorkerID:          *worker,
		Mode:              store.Mode(*mode),
		HeartbeatInterval: *heartbeat,
		PollInterval:      *poll,
		LogTailBytes:      *logTail,
		KillGrace:         *grace,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	}
	if *evaluator != "" {
		cfg.Evaluator = []string{"sh", "-c", *evaluator}
	}
	fmt.Fprintf(stdout, "agl controller: %s, concurrency %d, harness %q\n", c.BaseURL, max(*concurrency, 1), fs.Args())
	return controller.Run(ctx, cfg)
}
