package sandbox

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// ExitFailed is the exit status of `agl sandbox exec` and `agl sandbox
// forward` when they cannot run the command at all: a usage error, a bad
// spec, a sandbox that fails to start. It is 125, as env(1) and container
// runtimes use, so that no status of the command itself is taken for it.
const ExitFailed = 125

// parseCLI parses the command line of `agl sandbox exec` or `agl sandbox
// forward` (fs is named so). It reports done when the caller must return
// code: -h or --help printed the usage (synopsis, about, flags, where
// the config keys are described) on stdout,
// code 0; a bad flag or a missing command printed one line on stderr,
// code ExitFailed. Arguments after -- are left alone.
func parseCLI(fs *flag.FlagSet, args []string, synopsis, about string, stdout, stderr io.Writer) (code int, done bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, "Usage: %s %s\n\n%s\n\nFlags:\n", fs.Name(), synopsis, about)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fmt.Fprint(stdout, "\nConfig keys (the sandbox's: controller.sandbox): docs/reference/config.md. Every command, flag and exit status: docs/reference/cli.md.\n")
		return 0, true
	case err != nil:
		return usageFailed(fs, stderr, err.Error()), true
	case fs.NArg() == 0:
		return usageFailed(fs, stderr, "want a COMMAND to run after --"), true
	}
	return 0, false
}

// usageFailed prints a usage error on one line of stderr, with where the
// usage is, and returns ExitFailed.
func usageFailed(fs *flag.FlagSet, stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "%s: %s (see 'agl help %s')\n", fs.Name(), msg, strings.TrimPrefix(fs.Name(), "agl "))
	return ExitFailed
}
