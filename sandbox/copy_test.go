//go:build linux

package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aglrl/agl/sandbox"
)

// TestCopyWorkspace: a workspace an agent wrote is copied within its
// bounds; a huge sparse file, too many tiny files or a slow copy are
// refused with the bound named, and a FIFO, a device node or links
// pointing outside neither hang the copy nor lead it outside.
func TestCopyWorkspace(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	bounds := sandbox.CopyBounds{MaxBytes: 1 << 20, MaxFiles: 100, Timeout: 10 * time.Second}
	cases := []struct {
		name   string
		make   func(t *testing.T, ws string)
		bounds sandbox.CopyBounds
		limit  string            // the CopyLimitError's, "" = copied
		want   map[string]string // files expected in the copy (with contents)
		links  map[string]string // links expected in the copy (with targets)
		absent []string
	}{
		{name: "plain", make: func(t *testing.T, ws string) {
			writeTree(t, ws, map[string]string{"calc.py": "x", "pkg/a.py": "a"})
		}, want: map[string]string{"calc.py": "x", "pkg/a.py": "a"}},
		{name: "a sparse file of 1 TB", make: func(t *testing.T, ws string) {
			writeTree(t, ws, map[string]string{"calc.py": "x"})
			if err := os.Truncate(mustCreate(t, filepath.Join(ws, "big")), 1<<40); err != nil {
				t.Fatal(err)
			}
		}, limit: sandbox.CopyLimitBytes},
		{name: "files over the size together", make: func(t *testing.T, ws string) {
			for i := range 3 {
				writeTree(t, ws, map[string]string{fmt.Sprintf("f%d", i): string(make([]byte, 400<<10))})
			}
		}, limit: sandbox.CopyLimitBytes},
		{name: "many tiny files", make: func(t *testing.T, ws string) {
			for i := range 150 {
				mustCreate(t, filepath.Join(ws, "many", fmt.Sprint(i)))
			}
		}, limit: sandbox.CopyLimitFiles},
		{name: "many tiny files, no file bound, a short time", make: func(t *testing.T, ws string) {
			for i := range 2000 {
				mustCreate(t, filepath.Join(ws, "many", fmt.Sprint(i)))
			}
		}, bounds: sandbox.CopyBounds{Timeout: time.Nanosecond}, limit: sandbox.CopyLimitTime},
		{name: "a FIFO and a device node", make: func(t *testing.T, ws string) {
			writeTree(t, ws, map[string]string{"calc.py": "x"})
			if err := syscall.Mkfifo(filepath.Join(ws, "pipe"), 0o644); err != nil {
				t.Fatal(err)
			}
			// /dev/null's numbers; mknod needs root (skipped in that case).
			syscall.Mknod(filepath.Join(ws, "null"), syscall.S_IFCHR|0o666, 1<<8|3)
		}, want: map[string]string{"calc.py": "x"}, absent: []string{"pipe", "null"}},
		{name: "links to outside", make: func(t *testing.T, ws string) {
			writeTree(t, ws, map[string]string{"calc.py": "x"})
			os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws, "abs"))
			os.Symlink("../../../../../../../../"+outside, filepath.Join(ws, "up"))
			os.Symlink(outside, filepath.Join(ws, "dir"))
		}, want: map[string]string{"calc.py": "x"},
			links: map[string]string{"abs": "", "up": "", "dir": ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws, dst := t.TempDir(), t.TempDir()
			c.make(t, ws)
			b := bounds
			if c.bounds != (sandbox.CopyBounds{}) {
				b = c.bounds
			}
			done := make(chan error, 1)
			go func() { done <- sandbox.CopyWorkspace(context.Background(), ws, dst, nil, b) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the copy hangs")
			}
			var le *sandbox.CopyLimitError
			switch {
			case c.limit == "" && err != nil:
				t.Fatalf("copy: %v", err)
			case c.limit != "" && !errors.As(err, &le):
				t.Fatalf("copy: %v, want a %s limit error", err, c.limit)
			case c.limit != "":
				if le.Limit != c.limit || le.Path == "" {
					t.Errorf("limit %q at %q, want %q at a path (%v)", le.Limit, le.Path, c.limit, err)
				}
				return
			}
			for p, want := range c.want {
				if got, err := os.ReadFile(filepath.Join(dst, p)); err != nil || string(got) != want {
					t.Errorf("%s: %q, %v; want %q", p, got, err, want)
				}
			}
			for p := range c.links {
				want, _ := os.Readlink(filepath.Join(ws, p))
				fi, err := os.Lstat(filepath.Join(dst, p))
				got, _ := os.Readlink(filepath.Join(dst, p))
				if err != nil || fi.Mode()&os.ModeSymlink == 0 || got != want {
					t.Errorf("%s: not copied as the link to %q (%v, %q)", p, want, err, got)
				}
			}
			for _, p := range c.absent {
				if _, err := os.Lstat(filepath.Join(dst, p)); err == nil {
					t.Errorf("%s was copied", p)
				}
			}
			if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "outside" {
				t.Errorf("the file outside changed: %q", b)
			}
		})
	}
}

func mustCreate(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}
