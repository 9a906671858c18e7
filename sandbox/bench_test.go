//go:build linux

package sandbox_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/sandbox"
)

// BenchmarkCommand is the sandbox's overhead per command: `bash -c true`
// run directly against the same command through sandbox.Run (bwrap,
// namespaces, cgroups, rlimits). Report the ratio of the two.
func BenchmarkCommand(b *testing.B) {
	testutil.RequireBwrap(b)
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("bash", "-c", "true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sandbox", func(b *testing.B) {
		s := sandbox.Spec{Workspace: b.TempDir()}
		for b.Loop() {
			if res, err := sandbox.Run(context.Background(), s, []string{"bash", "-c", "true"}, nil, io.Discard, io.Discard); err != nil || res.Exit != 0 {
				b.Fatal(res, err)
			}
		}
	})
}

var benchRepo = map[string]string{
	"calc.py":            "def add(a, b):\n    return a + b\n",
	"tests/__init__.py":  "",
	"tests/test_calc.py": "import unittest\nimport calc\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n",
}

// BenchmarkEvaluation is one test-based evaluation: Python's unittest on a
// small repository run directly, against what the controller does (a
// fresh tmpfs, the workspace copied in, the hidden tests restored, the
// tests run in a fresh sandbox). Both use /usr/bin/python3.
func BenchmarkEvaluation(b *testing.B) {
	testutil.RequireBwrap(b)
	src := b.TempDir()
	writeTree(&testing.T{}, src, benchRepo)
	ws, pristine := b.TempDir(), b.TempDir()
	if err := sandbox.Prepare(src, ws, pristine, []string{"tests"}); err != nil {
		b.Fatal(err)
	}
	argv := []string{"/usr/bin/python3", "-m", "unittest", "tests.test_calc.T.test_add"}
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir = src
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatal(err, string(out))
			}
		}
	})
	b.Run("sandbox", func(b *testing.B) {
		for b.Loop() {
			dir := filepath.Join(b.TempDir(), "eval")
			os.Mkdir(dir, 0o755)
			mounted := sandbox.MountWorkspace(dir, 64<<20)
			if err := sandbox.CopyTree(ws, dir, nil); err != nil {
				b.Fatal(err)
			}
			if _, err := sandbox.RestoreHidden(pristine, dir, []string{"tests"}); err != nil {
				b.Fatal(err)
			}
			res, err := sandbox.Run(context.Background(), sandbox.Spec{Workspace: dir}, argv, nil, io.Discard, io.Discard)
			if err != nil || res.Exit != 0 {
				b.Fatal(res, err)
			}
			if mounted {
				sandbox.Unmount(dir)
			}
		}
	})
}
