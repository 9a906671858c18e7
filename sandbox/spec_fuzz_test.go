package sandbox_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aglrl/agl/sandbox"
)

// FuzzLoadSpec feeds arbitrary bytes to sandbox.Load, the reader of the
// spec file `agl sandbox exec` is given. A spec it accepts must still
// give bubblewrap's isolation flags first, exactly one read-write bind
// (the workspace at /workspace) plus the gateway socket's when set, no
// other writable bind, and the command after "--" unchanged: no field's
// value can turn into a bwrap option of its own.
func FuzzLoadSpec(f *testing.F) {
	for _, s := range []string{
		`{"workspace":"/tmp/ws","limits":{"timeout":1000000000}}`,
		`{"workspace":"/tmp/ws","read_only":["/opt/node"],"env":["A=1","B"],"socket":"/tmp/s.sock","limits":{"memory_bytes":-1,"disk_bytes":1}}`,
		`{"workspace":"relative"}`,
		`{"workspace":"/w","read_only":["--bind"],"env":["--bind=/ /"]}`,
		`{}`,
		`[`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	argv := []string{"bash", "-c", "--bind / /"}
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "spec.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := sandbox.Load(path)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "sandbox spec") {
				t.Fatalf("%q: error does not say it is the spec: %v", b, err)
			}
			return
		}
		if !filepath.IsAbs(s.Workspace) {
			t.Fatalf("%q: accepted a workspace that is not absolute: %q", b, s.Workspace)
		}
		a := sandbox.Args(s, argv)
		for i, want := range []string{"--die-with-parent", "--new-session", "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"} {
			if i >= len(a) || a[i] != want {
				t.Fatalf("%q: args start %q, want the isolation flags first", b, a[:min(len(a), 7)])
			}
		}
		// Walk bwrap's options as bwrap parses them: each option takes a
		// fixed number of operands, so an operand that looks like an
		// option (an env value "--bind") is not one.
		operands := map[string]int{
			"--bind": 2, "--bind-try": 2, "--dev-bind": 2, "--dev-bind-try": 2,
			"--ro-bind": 2, "--ro-bind-try": 2, "--symlink": 2, "--setenv": 2,
			"--size": 1, "--tmpfs": 1, "--hostname": 1, "--chdir": 1, "--proc": 1, "--dev": 1, "--dir": 1, "--cap-drop": 1,
		}
		binds, sep := 0, -1
		for i := 0; i < len(a) && sep < 0; i++ {
			switch a[i] {
			case "--":
				sep = i
				continue
			case "--bind", "--bind-try", "--dev-bind", "--dev-bind-try":
				binds++
				if binds == 1 && (i+2 >= len(a) || a[i+1] != s.Workspace || a[i+2] != sandbox.Mount) {
					t.Fatalf("%q: first writable bind is %q, want the workspace", b, a[i:min(i+3, len(a))])
				}
				if binds == 2 && (s.Socket == "" || a[i+1] != s.Socket || a[i+2] != sandbox.SocketMount) {
					t.Fatalf("%q: a second writable bind %q", b, a[i:min(i+3, len(a))])
				}
			}
			i += operands[a[i]]
		}
		if sep < 0 || !slices.Equal(a[sep+1:], argv) {
			t.Fatalf("%q: the command is not what follows bwrap's \"--\": %q", b, a)
		}
		if want := 1 + btoi(s.Socket != ""); binds != want {
			t.Fatalf("%q: %d writable binds, want %d: %q", b, binds, want, a)
		}
		l := s.Limits.WithDefaults()
		if l.Timeout <= 0 || l.CPUSeconds <= 0 || l.MemoryBytes <= 0 || l.Processes <= 0 || l.DiskBytes <= 0 || l.OutputBytes <= 0 {
			t.Fatalf("%q: a limit left unbounded: %+v", b, l)
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
