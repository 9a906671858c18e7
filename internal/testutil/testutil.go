// Package testutil holds the helpers that the tests of several packages
// share: the repository's fixtures (testdata/), a scripted engine standing
// in for the model, a loopback address, a SQLite store in a temporary
// folder, a JSON Lines reader, and the gates of the tests that need an external program
// (bubblewrap, the coding CLIs, python3): a missing program skips the
// test, unless its AGL_REQUIRE_* variable makes that a failure. The short
// lane (go test -short) also skips the real coding CLIs ([CLIs]) and
// whatever a test hands to [SkipShort].
package testutil

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

// Root is the repository root: the first folder holding go.mod above the
// working directory (a test's package directory).
func Root() (string, error) {
	dir, err := filepath.Abs(".")
	if err != nil {
		return "", fmt.Errorf("testutil: working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("testutil: no go.mod above %s", dir)
		}
		dir = up
	}
}

// FreeAddr is a loopback host:port that was free a moment ago (for a
// subprocess that takes --listen).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// SQLite opens a store in agl.db under t.TempDir() and closes it when the
// test ends.
func SQLite(t testing.TB) *sqlite.Store {
	t.Helper()
	return ObservedSQLite(t, nil)
}

// ObservedSQLite is SQLite whose writes obs observes (nil: none).
func ObservedSQLite(t testing.TB, obs store.Observer) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agl.db"), sqlite.Options{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// required reports whether the environment variable name asks for a
// failure instead of a skip: name=1, or (when ci) CI set to anything but
// "", "false" or "0".
func required(name string, ci bool) bool {
	if os.Getenv(name) == "1" {
		return true
	}
	c := os.Getenv("CI")
	return ci && c != "" && c != "false" && c != "0"
}

// skipOrFail skips the test with msg, or fails it when required.
func skipOrFail(t testing.TB, req bool, msg string) {
	t.Helper()
	if req {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// SkipShort skips the test in the short lane (go test -short), saying why
// it belongs to the full lane.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("short lane: " + why)
	}
}

// SkipRace skips the test under the race detector. It is for tests whose
// work is model numerics (training or running a GoMLX model on the
// calling goroutine), which the race detector slows 6–40× while checking
// GoMLX's kernels rather than agl's concurrency. Such a test runs in the
// non-race lane instead: scripts/test.sh runs the tests listed in
// scripts/norace-tests.txt first, without -race, and TestNonRaceLane checks
// that this list names exactly the tests that call SkipRace.
func SkipRace(t testing.TB, why string) {
	t.Helper()
	if race {
		t.Skip("race lane: " + why + "; scripts/test.sh runs it without the race detector")
	}
}

// RequireBwrap skips the test without bubblewrap, unless
// AGL_REQUIRE_BWRAP=1 (CI) makes a missing bwrap a failure.
func RequireBwrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		skipOrFail(t, required("AGL_REQUIRE_BWRAP", false), "bubblewrap (bwrap) is not installed (AGL_REQUIRE_BWRAP=1 makes this a failure)")
	}
}

// CLIs is the bin folder holding the pinned coding CLIs named (claude,
// codex) that scripts/install-clis.sh installs in .cache/npm-clis at the
// repository root, or $AGL_CLIS_DIR. It skips the test in the short lane,
// and when one is missing, unless AGL_REQUIRE_CLIS=1 or CI makes that a
// failure.
func CLIs(t testing.TB, names ...string) string {
	t.Helper()
	SkipShort(t, "runs the real coding CLIs")
	dir := os.Getenv("AGL_CLIS_DIR")
	if dir == "" {
		root, err := Root()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, ".cache", "npm-clis", "node_modules", ".bin")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			skipOrFail(t, required("AGL_REQUIRE_CLIS", true), n+" is not installed in "+dir+": run scripts/install-clis.sh")
		}
	}
	return dir
}

// Python is the path of python3, which the example harnesses run on; the
// test skips without it.
func Python(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	return p
}
