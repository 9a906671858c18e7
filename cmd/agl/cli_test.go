package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aglrl/agl/sandbox"
)

// tableEntry is a command of the command table with its words.
type tableEntry struct {
	path []string // "model", "init"
	cmd  command
}

// table walks the command table: every command and subcommand, so that
// a new one is tested without being listed here.
func table() []tableEntry {
	var out []tableEntry
	var walk func(path []string, cs []command)
	walk = func(path []string, cs []command) {
		for _, c := range cs {
			p := append(append([]string(nil), path...), c.name)
			out = append(out, tableEntry{p, c})
			walk(p, c.subs)
		}
	}
	walk(nil, commands())
	return out
}

// aglExit runs the built agl and returns its exit status and output.
func aglExit(t *testing.T, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	stdout, stderr, err := aglRun(bin, args...)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout, stderr
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout, stderr
	}
	t.Fatalf("agl %q: %v", args, err)
	return 0, "", ""
}

// flagRE finds the flags in a usage's flag list.
var flagRE = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)

// docSection returns the text of a markdown section from its heading to
// the next heading.
func docSection(doc, heading string) (string, bool) {
	i := strings.Index(doc, heading+"\n")
	if i < 0 {
		return "", false
	}
	sec := doc[i+len(heading):]
	if j := strings.Index(sec, "\n#"); j >= 0 {
		sec = sec[:j]
	}
	return sec, true
}

// isOneLine tells whether s is exactly one line.
func isOneLine(s string) bool { return strings.Count(s, "\n") == 1 && strings.HasSuffix(s, "\n") }

// TestCLIHelpAndUsageErrors runs the built binary over every command and
// subcommand of the table: -h, --help and `agl help CMD [SUB]` print the
// usage on stdout (naming the config keys' page) and exit 0 with nothing
// on stderr; an unknown flag is one line on stderr pointing at the
// command's help, exit 2 (125 for sandbox exec and forward, whose other
// statuses are their command's).
func TestCLIHelpAndUsageErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	entries := table()
	if len(entries) < 15 {
		t.Fatalf("the command table has %d entries", len(entries))
	}
	doc, err := os.ReadFile("../../docs/reference/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := strings.Join(e.path, " ")
		t.Run(name, func(t *testing.T) {
			for _, args := range [][]string{
				append(append([]string(nil), e.path...), "-h"),
				append(append([]string(nil), e.path...), "--help"),
				append([]string{"help"}, e.path...),
			} {
				code, stdout, stderr := aglExit(t, bin, args...)
				synopsis := strings.HasPrefix(stdout, "Usage: agl "+name+" ") || strings.HasPrefix(stdout, "Usage: agl "+name+"\n")
				if code != 0 || stderr != "" || !synopsis {
					t.Errorf("agl %q: exit %d, stderr %q, stdout %q: want exit 0, the usage on stdout", args, code, stderr, stdout)
				}
				if !strings.Contains(stdout, "docs/reference/config.md") {
					t.Errorf("agl %q: the usage does not name docs/reference/config.md:\n%s", args, stdout)
				}
			}
			// docs/reference/cli.md describes the command and each of its flags.
			_, stdout, _ := aglExit(t, bin, append([]string{"help"}, e.path...)...)
			sec, ok := docSection(string(doc), "### `agl "+name+"`")
			if !ok {
				t.Errorf("docs/reference/cli.md has no section ### `agl %s`", name)
			}
			for _, f := range flagRE.FindAllStringSubmatch(stdout, -1) {
				if !strings.Contains(sec, "`--"+f[1]+"`") && !strings.Contains(sec, "`--"+f[1]+" ") {
					t.Errorf("docs/reference/cli.md, agl %s: flag --%s is not described", name, f[1])
				}
			}
			want := exitUsage
			if e.cmd.main != nil {
				want = sandbox.ExitFailed
			}
			bad := append(append([]string(nil), e.path...), "--no-such-flag")
			code, stdout, stderr := aglExit(t, bin, bad...)
			if code != want || stdout != "" || !isOneLine(stderr) || !strings.Contains(stderr, "no-such-flag") || !strings.Contains(stderr, "'agl help "+name+"'") {
				t.Errorf("agl %q: exit %d, stdout %q, stderr %q: want exit %d and one line naming the flag and 'agl help %s'", bad, code, stdout, stderr, want, name)
			}
			if len(e.cmd.subs) > 0 {
				code, _, stderr := aglExit(t, bin, e.path...)
				if code != exitUsage || !isOneLine(stderr) || !strings.Contains(stderr, "want a subcommand") {
					t.Errorf("agl %s without a subcommand: exit %d, stderr %q", name, code, stderr)
				}
			}
		})
	}
}

// TestCLIExitStatus: agl itself, unknown commands and subcommands, extra
// and missing arguments, runtime errors, and arguments after --.
func TestCLIExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		code, stdout, stderr := aglExit(t, bin, args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "Usage: agl COMMAND") || !strings.Contains(stdout, "docs/reference/config.md") {
			t.Errorf("agl %q: exit %d, stderr %q, stdout %q", args, code, stderr, stdout)
		}
		for _, e := range table() {
			if len(e.path) == 1 && !strings.Contains(stdout, "\n  "+e.path[0]+" ") {
				t.Errorf("agl %q does not list %s", args, e.path[0])
			}
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string // in the one line on stderr
	}{
		{nil, exitUsage, "want a command"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"help", "model", "frobnicate"}, exitUsage, `unknown subcommand "frobnicate"`},
		{[]string{"help", "version", "x"}, exitUsage, "agl version: has no subcommands"},
		{[]string{"store", "frobnicate"}, exitUsage, "'agl help store'"},
		{[]string{"model", "info"}, exitUsage, "want one model directory"},
		{[]string{"model", "info", "a", "b"}, exitUsage, "'agl help model info'"},
		{[]string{"rollouts", "show"}, exitUsage, "want one rollout id"},
		{[]string{"train"}, exitUsage, "want one config file"},
		{[]string{"version", "extra"}, exitUsage, `unexpected arguments ["extra"]`},
		{[]string{"export", "--format", "csv"}, exitUsage, `--format "csv"`},
		{[]string{"train", "--steps", "x", "a.yaml"}, exitUsage, `invalid value "x" for flag -steps`},
		// Runtime errors exit 1.
		{[]string{"model", "info", "/nonexistent/model"}, exitFailed, "/nonexistent/model"},
		// After --, -h is an argument (here a model directory), not help.
		{[]string{"model", "info", "--", "-h"}, exitFailed, "agl: "},
		{[]string{"sandbox", "exec", "--spec", "/nonexistent/spec.json", "--", "true"}, sandbox.ExitFailed, "/nonexistent/spec.json"},
		{[]string{"sandbox", "exec", "--", "true"}, sandbox.ExitFailed, "want --spec FILE"},
		{[]string{"sandbox", "exec", "--spec", "x"}, sandbox.ExitFailed, "want a COMMAND"},
	} {
		code, stdout, stderr := aglExit(t, bin, tc.args...)
		if code != tc.code || stdout != "" || !isOneLine(stderr) || !strings.Contains(stderr, tc.want) {
			t.Errorf("agl %q: exit %d, stdout %q, stderr %q: want exit %d and one line with %q", tc.args, code, stdout, stderr, tc.code, tc.want)
		}
	}
}

// TestCLISandboxExecStatus: agl sandbox exec exits with its command's
// status and leaves the command's arguments alone, flags included.
func TestCLISandboxExecStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("AGL_REQUIRE_BWRAP") == "1" {
			t.Fatal("bubblewrap (bwrap) is not installed and AGL_REQUIRE_BWRAP=1")
		}
		t.Skip("bubblewrap (bwrap) is not installed")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dir, "spec.json")
	if err := (sandbox.Spec{Workspace: ws}).Save(spec); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
	}{
		{[]string{"sh", "-c", "exit 7"}, 7, ""},
		{[]string{"sh", "-c", "exit 2"}, 2, ""},
		{[]string{"sh", "-c", "exit 125"}, 125, ""},
		{[]string{"true"}, 0, ""},
		{[]string{"echo", "-h", "--help", "--no-such-flag"}, 0, "-h --help --no-such-flag\n"},
	} {
		code, stdout, stderr := aglExit(t, bin, append([]string{"sandbox", "exec", "--spec", spec, "--"}, tc.args...)...)
		if code != tc.code || stdout != tc.stdout {
			t.Errorf("agl sandbox exec -- %q: exit %d, stdout %q, stderr %q: want exit %d, stdout %q", tc.args, code, stdout, stderr, tc.code, tc.stdout)
		}
	}
}
