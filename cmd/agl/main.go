// Command agl trains the LLM behind any agent harness with reinforcement
// learning. Run `agl help` for the commands.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/aglrl/agl/sandbox"
)

// command is one command or subcommand of agl: a group of subcommands
// (subs), a command whose flags the dispatcher parses through run, or
// one that parses its own arguments and exits with a status of its own
// (main: sandbox exec and forward, whose status is their child's and
// whose own errors, usage errors too, exit sandbox.ExitFailed).
type command struct {
	name    string
	args    string // what follows the name in the synopsis
	summary string // one line, in the parent's list
	about   string // the usage's text ("" : the summary)
	run     func(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error
	main    func(ctx context.Context, args []string, stdout, stderr io.Writer) int
	subs    []command
}

// Exit statuses of agl (sandbox exec and forward: their child's, or
// sandbox.ExitFailed for their own errors).
const (
	exitFailed = 1 // the command ran and failed
	exitUsage  = 2 // the command line was wrong, as Go's flag package exits
)

// docsHint ends every usage: where the config keys and all commands are
// described.
const docsHint = "Config keys: docs/reference/config.md. Every command, flag and exit status: docs/reference/cli.md.\n"

func commands() []command {
	return []command{
		{name: "train", args: "[flags] CONFIG", summary: "run the whole RL loop on a config: gateway, controller, trainer, embedded model", run: runTrain,
			about: "Runs the whole RL loop of CONFIG in one process: the gateway agl gateway serves (store API, LLM\nroutes, /al, OTLP, dashboard, /metrics), the controller running the harness, the trainer and the\nembedded model. Flags may come before or after CONFIG."},
		{name: "gateway", args: "[flags]", summary: "serve the store API and LLM routes", run: runGateway,
			about: "Serves the store API, the LLM routes of the configured engine or policies, the dashboard\nand /metrics, until interrupted."},
		{name: "controller", args: "[flags] [-- HARNESS [ARG…]]", summary: "run harnesses for queued rollouts of a gateway", run: runController,
			about: "Claims rollouts from a gateway and runs the harness once per attempt; the harness after --\nreplaces the config's controller.command, and its arguments are left alone.\nThe admin key comes from AGL_ADMIN_KEY (or the config's gateway.admin_key)."},
		{name: "rollouts", summary: "list and inspect rollouts on a running gateway", subs: []command{
			{name: "ls", args: "[flags]", summary: "list rollouts, newest first", run: runRolloutsList},
			{name: "show", args: "[flags] ID", summary: "show a rollout and its attempts", run: runRolloutsShow},
			{name: "events", args: "[flags] ID", summary: "list a rollout's events", run: runRolloutsEvents},
		}},
		{name: "model", summary: "create or inspect a model directory", subs: []command{
			{name: "init", args: "--out DIR (--config FILE | --preset NAME) [flags]", summary: "create a model with random weights and a tokenizer", run: runModelInit},
			{name: "info", args: "DIR", summary: "describe a model directory: architecture, parameters, tokenizer, optimizer state", run: runModelInfo},
		}},
		{name: "sft", args: "--model DIR (--data FILE.jsonl | --from DATA_DIR|GATEWAY_URL) --out DIR [flags]", summary: "supervised fine-tuning on conversations or on stored rollouts", run: runSFT,
			about: "Trains the model of --model on the assistant replies of a JSONL of conversations (the\nrest of each conversation is context, not trained) and writes the checkpoint to --out.\nWith --from it trains on the calls a data dir's or a gateway's store recorded instead:\ntheir exact token ids and loss masks, merged as training merges them, duplicates\nremoved, selected by --min-reward, --mode, --rl-steps, --agent and --policy; --dry-run\nprints what would train. An interrupt (Ctrl-C) saves the steps done."},
		{name: "store", summary: "check, repair and prune a data dir's store", subs: []command{
			{name: "recover", args: "[flags]", summary: "reopen a SQLite store whose event journal a normal open refuses", run: runStoreRecover,
				about: "Opens a SQLite store whose event journal a normal open refuses (damaged, missing, of an\nunknown generation): keeps every intact journaled record, applies it, reports what was\nlost, and leaves the data dir openable. It takes the data dir's lock: stop the gateway or\ntrainer using it first."},
			{name: "prune", args: "(--older-than AGE | --before-step N | --max-bytes SIZE) [flags]", summary: "delete ended rollouts by age, step or size and reclaim the space", run: runPrune,
				about: "Deletes terminal rollouts (with their attempts and events) by age, trainer step or total\nsize, and reclaims the space; --dry-run lists what would go. Running and queued rollouts\nare never pruned. On SQLite it takes the data dir's lock: stop the gateway or trainer\nusing it first."},
		}},
		{name: "sandbox", summary: "run a command in a repository task's sandbox", subs: []command{
			{name: "exec", summary: "run COMMAND in the sandbox FILE describes; exit with its status", main: sandboxExec},
			{name: "forward", summary: "inside a sandbox: relay a loopback port to the gateway socket while COMMAND runs", main: sandboxForward},
		}},
		{name: "export", args: "[flags]", summary: "write training samples of terminal rollouts as JSONL or Parquet", run: runExport,
			about: "Writes the training samples of terminal rollouts as JSONL or Parquet, built by the code the\nembedded trainer uses, from the store of --store / --data-dir / --config (SQLite read-only,\nso beside a running gateway). A summary with the cursor to continue from (--after) goes\nto stdout as one JSON line, or to stderr when the samples go to stdout. Advantages are\nnormalized within the groups present in the export: export a step's rollouts together."},
		{name: "version", summary: "print the version", run: runVersion},
	}
}

// root is agl itself: the group of all commands.
func root() command {
	return command{name: "agl", summary: "train the LLM behind any agent harness with reinforcement learning", subs: commands()}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(report(err, os.Stderr))
}

// usageError is a command line agl cannot run: an unknown command,
// subcommand or flag, a missing or extra argument, a bad flag value.
type usageError struct {
	cmd string // the command whose help to point at ("model init"; "" for agl)
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef makes a usage error; the dispatcher names the command.
func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// exitStatus is a status a command exits with by itself (sandbox exec:
// its child's); it has printed whatever it had to say.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// report prints err on one line of stderr and returns the exit status:
// 0 without error, a command's own status, exitUsage with a pointer to
// the command's help for a usage error, else exitFailed.
func report(err error, stderr io.Writer) int {
	var st exitStatus
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &st):
		return int(st)
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %s (see '%s')\n", join("agl", ue.cmd), oneLine(ue.err), join("agl help", ue.cmd))
		return exitUsage
	}
	fmt.Fprintln(stderr, "agl:", oneLine(err))
	return exitFailed
}

// oneLine keeps CLI errors on one line.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// join joins the words that are not empty with spaces.
func join(words ...string) string {
	var out []string
	for _, w := range words {
		if w != "" {
			out = append(out, w)
		}
	}
	return strings.Join(out, " ")
}

// run runs the command line args (without the program name).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	r := root()
	if len(args) > 0 && args[0] == "help" {
		c, path, err := r.find(args[1:])
		if err != nil {
			return err
		}
		return c.dispatch(ctx, path, []string{"-h"}, stdout, stderr)
	}
	return r.dispatch(ctx, "", args, stdout, stderr)
}

// find walks the subcommands named by words: `agl help model init`.
func (c *command) find(words []string) (*command, string, error) {
	path := ""
	for _, w := range words {
		sub := c.sub(w)
		if sub == nil {
			return nil, "", c.unknown(path, w)
		}
		c, path = sub, join(path, w)
	}
	return c, path, nil
}

func (c *command) sub(name string) *command {
	for i := range c.subs {
		if c.subs[i].name == name {
			return &c.subs[i]
		}
	}
	return nil
}

func (c *command) subNames() string {
	names := make([]string, len(c.subs))
	for i, s := range c.subs {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}

// subWord is what the entries of agl (path "") or of a group are called.
func subWord(path string) string {
	if path == "" {
		return "command"
	}
	return "subcommand"
}

func (c *command) unknown(path, word string) error {
	if len(c.subs) == 0 {
		return &usageError{cmd: path, err: fmt.Errorf("has no subcommands (got %q)", word)}
	}
	return &usageError{cmd: path, err: fmt.Errorf("unknown %s %q: want one of %s", subWord(path), word, c.subNames())}
}

// dispatch runs c (named path, "" for agl itself) on args: a group picks
// its subcommand; -h or --help prints the usage on stdout.
func (c *command) dispatch(ctx context.Context, path string, args []string, stdout, stderr io.Writer) error {
	switch {
	case c.main != nil:
		if code := c.main(ctx, args, stdout, stderr); code != 0 {
			return exitStatus(code)
		}
		return nil
	case c.run != nil:
		fs := flag.NewFlagSet(join("agl", path), flag.ContinueOnError)
		fs.SetOutput(io.Discard) // errors come back to report; help is printed below
		fs.Usage = func() {}
		err := c.run(ctx, fs, args, stdout)
		if errors.Is(err, flag.ErrHelp) {
			c.usage(stdout, path, fs)
			return nil
		}
		if ue := (*usageError)(nil); errors.As(err, &ue) {
			ue.cmd = path
		}
		return err
	}
	if len(args) == 0 {
		return &usageError{cmd: path, err: fmt.Errorf("want a %s: %s", subWord(path), c.subNames())}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		c.usage(stdout, path, nil)
		return nil
	}
	sub := c.sub(args[0])
	if sub == nil {
		return c.unknown(path, args[0])
	}
	return sub.dispatch(ctx, join(path, args[0]), args[1:], stdout, stderr)
}

// usage prints c's usage: its synopsis, text, subcommands or flags (fs),
// and where the config keys are described.
func (c *command) usage(w io.Writer, path string, fs *flag.FlagSet) {
	name := join("agl", path)
	switch {
	case path == "":
		fmt.Fprintf(w, "agl %s — %s\n\nUsage: agl COMMAND [flags]\n", version(), c.summary)
	case len(c.subs) > 0:
		fmt.Fprintf(w, "Usage: %s SUBCOMMAND [flags]\n\n%s\n", name, c.summary)
	default:
		fmt.Fprintf(w, "Usage: %s\n\n%s\n", join(name, c.args), cmp.Or(c.about, c.summary))
	}
	if len(c.subs) > 0 {
		word := subWord(path)
		fmt.Fprintf(w, "\n%ss:\n", strings.ToUpper(word[:1])+word[1:])
		for _, s := range c.subs {
			fmt.Fprintf(w, "  %-10s %s\n", s.name, s.summary)
		}
		if path == "" {
			fmt.Fprintf(w, "  %-10s %s\n", "help", "show this, or `agl help COMMAND [SUBCOMMAND]` for a command's usage and flags")
			fmt.Fprint(w, "\nConfiguration: a YAML file (--config), overridden by AGL_* environment variables\n(AGL_DATA_DIR, AGL_STORE_URL, AGL_LISTEN, AGL_ADMIN_KEY, AGL_GATEWAY_URL), overridden by flags.\n")
		}
		fmt.Fprintf(w, "\nRun '%s' for a %s's usage and flags (or add -h or --help).\n", join("agl help", path, strings.ToUpper(word)), word)
	}
	if fs != nil && hasFlags(fs) {
		fmt.Fprintln(w, "\nFlags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	if path == "" {
		fmt.Fprintf(w, "\nExit status: 0 done, %d failed, %d usage error; agl sandbox exec and forward: their command's status, %d their own usage error or failure.\n",
			exitFailed, exitUsage, sandbox.ExitFailed)
	}
	fmt.Fprint(w, "\n"+docsHint)
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parseFlags parses a command's flags: -h and --help come back as
// flag.ErrHelp (the dispatcher prints the usage), anything wrong as a
// usage error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return &usageError{err: err}
}

// noArgs is a usage error when fs has arguments left after its flags.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	return nil
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

func runVersion(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "agl", version())
	return nil
}
