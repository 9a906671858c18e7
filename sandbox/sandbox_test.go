//go:build linux

package sandbox_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/sandbox"
)

// tree lists the files under dir (slash paths) with their contents.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, _ := os.ReadFile(p)
		m[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	return m
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, s := range files {
		f := filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(f), 0o755)
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var repoFiles = map[string]string{
	"calc.py": "x", "README": "r", "tests/test_calc.py": "hidden", "tests/__init__.py": "",
	".git/HEAD": "ref", ".git/objects/ab/cd": "blob", "pkg/.gitignore": "kept", "pkg/secret_test.py": "hidden too",
}

// TestPrepare: a workspace from a directory or a tarball has no .git and
// no hidden files; those go to the pristine dir.
func TestPrepare(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, repoFiles)
	var tgz bytes.Buffer
	gz := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(gz)
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for k := range repoFiles {
			if !yield(k) {
				return
			}
		}
	}) {
		tw.WriteHeader(&tar.Header{Name: "./" + p, Mode: 0o644, Size: int64(len(repoFiles[p])), Typeflag: tar.TypeReg})
		tw.Write([]byte(repoFiles[p]))
	}
	tw.Close()
	gz.Close()
	tarPath := filepath.Join(t.TempDir(), "repo.tar.gz")
	os.WriteFile(tarPath, tgz.Bytes(), 0o644)
	hidden, err := sandbox.CheckHidden([]string{"tests/", "pkg/secret_test.py"})
	if err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{src, tarPath} {
		ws, pristine := t.TempDir(), filepath.Join(t.TempDir(), "p")
		if err := sandbox.Prepare(from, ws, pristine, hidden); err != nil {
			t.Fatal(err)
		}
		if got, want := tree(t, ws), map[string]string{"calc.py": "x", "README": "r", "pkg/.gitignore": "kept"}; !equal(got, want) {
			t.Errorf("%s: workspace %v, want %v", from, got, want)
		}
		if got, want := tree(t, pristine), map[string]string{"tests/test_calc.py": "hidden", "tests/__init__.py": "", "pkg/secret_test.py": "hidden too"}; !equal(got, want) {
			t.Errorf("%s: pristine %v, want %v", from, got, want)
		}
	}
	var evil bytes.Buffer
	tw = tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Name: "../../escape", Mode: 0o644, Typeflag: tar.TypeReg})
	tw.Close()
	evilPath := filepath.Join(t.TempDir(), "evil.tar")
	os.WriteFile(evilPath, evil.Bytes(), 0o644)
	if err := sandbox.Prepare(evilPath, t.TempDir(), "", nil); err == nil || !strings.Contains(err.Error(), "leaves the repository") {
		t.Errorf("a tar entry leaving the repository: %v", err)
	}
	for _, bad := range []string{"", "/etc/passwd", "..", "../x", "."} {
		if _, err := sandbox.CheckHidden([]string{bad}); err == nil {
			t.Errorf("hidden path %q accepted", bad)
		}
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestRestoreHidden: whatever the agent left at a hidden path (a changed
// file, a symlink out of the workspace, a file where a directory was) is
// replaced by the pristine files, and nothing outside is written.
func TestRestoreHidden(t *testing.T) {
	outside := t.TempDir()
	cases := []struct {
		name  string
		setup func(ws string)
	}{
		{"edited", func(ws string) { writeTree(t, ws, map[string]string{"tests/test_calc.py": "def test(): pass"}) }},
		{"deleted", func(ws string) {}},
		{"symlinked dir", func(ws string) { os.Symlink(outside, filepath.Join(ws, "tests")) }},
		{"symlinked file", func(ws string) {
			os.Mkdir(filepath.Join(ws, "tests"), 0o755)
			os.Symlink(filepath.Join(outside, "f"), filepath.Join(ws, "tests", "test_calc.py"))
		}},
		{"file for a dir", func(ws string) { os.WriteFile(filepath.Join(ws, "tests"), []byte("x"), 0o644) }},
	}
	pristine := t.TempDir()
	writeTree(t, pristine, map[string]string{"tests/test_calc.py": "real", "tests/__init__.py": ""})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := t.TempDir()
			writeTree(t, ws, map[string]string{"calc.py": "x"})
			c.setup(ws)
			if _, err := sandbox.RestoreHidden(pristine, ws, []string{"tests"}); err != nil {
				t.Fatal(err)
			}
			if got, want := tree(t, ws), map[string]string{"calc.py": "x", "tests/test_calc.py": "real", "tests/__init__.py": ""}; !equal(got, want) {
				t.Errorf("workspace %v, want %v", got, want)
			}
			if got := tree(t, outside); len(got) != 0 {
				t.Errorf("written outside the workspace: %v", got)
			}
		})
	}
}

// TestRun: exit statuses, the wall-time, output, memory and process
// limits, the read-only system and the missing network, each as the
// caller sees them (exit status, stderr marker, Result).
func TestRun(t *testing.T) {
	testutil.RequireBwrap(t)
	cases := []struct {
		name     string
		cmd      string
		exit     int
		limited  []string
		out, err string
	}{
		{"ok", "echo hi; pwd", 0, nil, "hi\n/workspace\n", ""},
		{"status", "exit 3", 3, nil, "", ""},
		{"signal", "kill -9 $$", 137, nil, "", ""},
		{"timeout", "sleep 30", sandbox.ExitTimeout, []string{"timeout"}, "", "timed out after 2s"},
		{"background survivor", "(sleep 30 &) ; echo started", 0, nil, "started\n", ""},
		{"output", "head -c 100000 /dev/zero | tr '\\0' x", 0, []string{"output"}, strings.Repeat("x", 1000) + "\n[agl sandbox: stdout truncated at 1000 bytes]\n", ""},
		{"memory", "python3 -c 'b = bytearray(1 << 30)'", 137, []string{"memory"}, "", "memory limit"},
		// bash retries a refused fork until the wall time ends it.
		{"processes", "for i in $(seq 100); do sleep 5 & done; wait", sandbox.ExitTimeout, []string{"timeout", "processes"}, "", "process limit"},
		{"disk", "dd if=/dev/zero of=big bs=1M count=100 2>/dev/null; echo $?", 0, []string{"disk"}, "1\n", "workspace is full"},
		{"read-only system", "touch /usr/x", 1, nil, "", "Read-only file system"},
		{"no network", "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), timeout=2)' 2>&1 | tail -1", 0, nil, "OSError: [Errno 101] Network is unreachable\n", ""},
		{"no git history", "git log", 128, nil, "", "not a git repository"},
		{"no host env", "echo \"[$AGL_SECRET_FOR_TEST]\"", 0, nil, "[]\n", ""},
	}
	t.Setenv("AGL_SECRET_FOR_TEST", "s3cret")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := t.TempDir()
			if sandbox.MountWorkspace(ws, 32<<20) {
				defer sandbox.Unmount(ws)
			} else if c.name == "disk" {
				t.Skip("not allowed to mount a tmpfs: no disk limit to test")
			}
			s := sandbox.Spec{Workspace: ws, Limits: sandbox.Limits{Timeout: 2 * time.Second, OutputBytes: 1000, MemoryBytes: 128 << 20, Processes: 32, DiskBytes: 32 << 20}}
			var out, errb bytes.Buffer
			began := time.Now()
			res, err := sandbox.Run(context.Background(), s, []string{"bash", "-c", c.cmd}, nil, &out, &errb)
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(began); d > 5*time.Second {
				t.Errorf("took %s: not bounded by the 2s timeout", d)
			}
			if res.Exit != c.exit {
				t.Errorf("exit %d, want %d (stderr %q)", res.Exit, c.exit, errb.String())
			}
			if c.limited != nil && !slices.Equal(res.Limited(), c.limited) {
				t.Errorf("limited %v, want %v", res.Limited(), c.limited)
			}
			if c.limited == nil && len(res.Limited()) > 0 {
				t.Errorf("limited %v, want none", res.Limited())
			}
			if c.out != "" && out.String() != c.out {
				t.Errorf("stdout %q, want %q", out.String(), c.out)
			}
			if !strings.Contains(errb.String(), c.err) {
				t.Errorf("stderr %q lacks %q", errb.String(), c.err)
			}
			wantCut := map[string]int64{"output": 100000 - 1000}[c.name]
			if res.CutBytes != wantCut {
				t.Errorf("cut %d bytes, want %d", res.CutBytes, wantCut)
			}
			want := map[string]string{"read-only system": sandbox.BlockedReadOnly, "no network": sandbox.BlockedNetwork, "no git history": sandbox.BlockedGit}[c.name]
			if got := strings.Join(res.Blocked, ","); got != want {
				t.Errorf("blocked %q, want %q", got, want)
			}
		})
	}
}

// TestExecMainState: commands of one spec share the workspace (state
// persists across calls), and a bad spec is a one-line error, status 125.
func TestExecMainState(t *testing.T) {
	testutil.RequireBwrap(t)
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	spec := filepath.Join(dir, "spec.json")
	journal := filepath.Join(dir, "journal")
	if err := (sandbox.Spec{Workspace: ws, Journal: journal}).Save(spec); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := sandbox.ExecMain(context.Background(), args, nil, &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, _, errs := run("--spec", spec, "--", "bash", "-c", "echo state > f"); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if code, out, _ := run("--spec", spec, "--", "cat", "f"); code != 0 || out != "state\n" {
		t.Errorf("second call: exit %d, %q", code, out)
	}
	rs, err := sandbox.ReadJournal(journal)
	if err != nil || len(rs) != 2 || rs[1].Argv[0] != "cat" {
		t.Errorf("journal %+v, %v", rs, err)
	}
	os.WriteFile(spec, []byte("{"), 0o600)
	if code, _, errs := run("--spec", spec, "--", "true"); code != 125 || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, "sandbox spec") {
		t.Errorf("bad spec: exit %d, %q", code, errs)
	}
}
