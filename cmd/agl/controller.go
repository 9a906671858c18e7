package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/aglrl/agl/app"
	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/store"
)

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// runController is `agl controller [flags] [-- HARNESS ARGS…]`: it claims
// rollouts from a gateway and runs the harness once per attempt. Settings
// come from the config file's controller section, overridden by flags; the
// harness after -- replaces the configured command.
func runController(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	cfgPath := fs.String("config", "", "YAML config file (its controller: and gateway: sections)")
	gw := fs.String("gateway", "", "gateway URL (default env AGL_GATEWAY_URL, else the config's gateway.listen, else http://127.0.0.1:8080)")
	concurrency := fs.Int("concurrency", 1, "attempts run at once")
	dir := fs.String("dir", "", "harness working directory (default: the current one)")
	var env multiFlag
	fs.Var(&env, "env", "extra KEY=VALUE for the harness (repeatable)")
	worker := fs.String("worker", "", "worker id (default host-pid)")
	mode := fs.String("mode", "", "claim only rollouts of this mode (train or val)")
	evaluator := fs.String("evaluator", "", "shell command run after a harness that exited 0 (see -reward-source); its stdout is the reward")
	rewardSource := fs.String("reward-source", "", "whose reward counts: harness, evaluator or both (default: evaluator with an evaluator, else harness)")
	heartbeat := fs.Duration("heartbeat", 0, "heartbeat interval (default 10s)")
	poll := fs.Duration("poll", 0, "wait when nothing is queued (default 500ms)")
	logTail := fs.Int("log-tail", 0, "bytes of stdout/stderr kept per attempt (default 4096)")
	grace := fs.Duration("kill-grace", 0, "wait between SIGTERM and SIGKILL (default 5s)")
	verbose := fs.Bool("v", false, "log each attempt")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fc, err := app.Load(*cfgPath)
	if err != nil {
		return err
	}
	sec, base := fc.Controller, fc.Base
	cfg := sec.Config(base)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["concurrency"] {
		cfg.Concurrency = *concurrency
	}
	if set["dir"] {
		cfg.Dir = *dir
	}
	cfg.Env = append(cfg.Env, env...)
	if set["worker"] {
		cfg.WorkerID = *worker
	}
	if set["mode"] {
		cfg.Mode = store.Mode(*mode)
	}
	if set["evaluator"] {
		cfg.Evaluator = []string{"sh", "-c", *evaluator}
	}
	if set["reward-source"] {
		cfg.RewardSource = *rewardSource
	}
	if set["heartbeat"] {
		cfg.HeartbeatInterval = *heartbeat
	}
	if set["poll"] {
		cfg.PollInterval = *poll
	}
	if set["log-tail"] {
		cfg.LogTailBytes = *logTail
	}
	if set["kill-grace"] {
		cfg.KillGrace = *grace
	}
	if fs.NArg() > 0 {
		cfg.Command = fs.Args()
	}
	switch sec.Kind {
	case "", controller.KindLocal, controller.KindKubernetes:
	default:
		return fmt.Errorf("controller: kind %q: want %s or %s", sec.Kind, controller.KindLocal, controller.KindKubernetes)
	}
	if sec.Kind != controller.KindKubernetes && sec.Kubernetes.Kind != 0 {
		return fmt.Errorf("controller: the config has a controller.kubernetes section but controller.kind is %q: set kind: kubernetes", cmp.Or(sec.Kind, controller.KindLocal))
	}
	if len(cfg.Command) == 0 && sec.Kind != controller.KindKubernetes {
		fmt.Fprintln(stdout, "agl controller: no harness command (after -- or controller.command): runs only Agent Lightning rollouts with config.local.agent_class")
	}
	cfg.GatewayURL = *gw
	if cfg.GatewayURL == "" {
		cfg.GatewayURL = os.Getenv("AGL_GATEWAY_URL")
	}
	if cfg.GatewayURL == "" {
		cfg.GatewayURL = listenURL(fc.Gateway.Listen)
	}
	cfg.AdminKey = fc.Gateway.AdminKey
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if sec.Kind == controller.KindKubernetes {
		b, err := app.KubernetesBackend(sec, base)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "agl controller: %s, kubernetes namespace %s, concurrency %d\n", cfg.GatewayURL, b.Namespace(), max(cfg.Concurrency, 1))
		return controller.Serve(ctx, cfg, b)
	}
	fmt.Fprintf(stdout, "agl controller: %s, concurrency %d, harness %q\n", cfg.GatewayURL, max(cfg.Concurrency, 1), cfg.Command)
	return controller.Run(ctx, cfg)
}

// listenURL turns a listen address into a URL to reach it locally.
func listenURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://127.0.0.1:8080"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
