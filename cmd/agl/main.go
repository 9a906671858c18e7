// Command agl trains the LLM behind any agent harness with reinforcement
// learning. Run `agl help` for the subcommands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand.
type command struct {
	name  string
	usage string
	run   func(ctx context.Context, args []string, stdout io.Writer) error
}

func commands() []command {
	return []command{
		{"train", "run the whole RL loop on a config: gateway, controller, trainer, embedded model", runTrain},
		{"gateway", "serve the store API and LLM routes", runGateway},
		{"controller", "run harnesses for queued rollouts of a gateway (-- COMMAND ARGS…)", runController},
		{"rollouts", "list and inspect rollouts on a running gateway (ls | show ID | events ID)", runRollouts},
		{"model", "create or inspect a model (init --config FILE|--preset NAME --out DIR | info DIR)", runModel},
		{"sft", "supervised warm start on a JSONL of conversations", runSFT},
		{"store", "check and repair a data dir's store (recover --data-dir DIR)", runStore},
		{"sandbox", "run a command in a repository task's sandbox (exec --spec FILE -- COMMAND…)", runSandbox},
		{"export", "write training samples of terminal rollouts as JSONL or Parquet", runExport},
		{"version", "print the version", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "agl:", oneLine(err))
		}
		os.Exit(1)
	}
}

// oneLine keeps CLI errors on one line.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			return run(ctx, []string{args[1], "-h"}, stdout, stderr)
		}
		usage(stdout)
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout)
		}
	}
	usage(stderr)
	return fmt.Errorf("unknown command %q (see agl help)", args[0])
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "agl %s — train the LLM behind any agent harness with reinforcement learning\n\nUsage: agl COMMAND [flags]\n\nCommands:\n", version())
	cs := commands()
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.usage)
	}
	fmt.Fprintf(w, "  %-10s %s\n", "help", "show this, or `agl help COMMAND` for a command's flags")
	fmt.Fprint(w, "\nConfiguration: a YAML file (--config), overridden by AGL_* environment variables\n(AGL_DATA_DIR, AGL_STORE_URL, AGL_LISTEN, AGL_ADMIN_KEY, AGL_GATEWAY_URL), overridden by flags.\n")
}

func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "dev"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += "+" + s.Value[:12]
		}
	}
	return v
}

func runVersion(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "agl", version())
	return nil
}
