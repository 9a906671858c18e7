//go:build linux

package controller_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/store"
)

// maxRSS is this process's peak resident set size in bytes.
func maxRSS(t testing.TB) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Maxrss << 10
}

// TestRepoVerdictCost measures one evaluation's wall time (rollouts of the
// honest fix, one at a time: the whole attempt, and the tests event's
// duration) and the controller's peak RSS while the tests print 70 MiB of
// newlines: the controller keeps only the tail of the output, so its peak
// grows by far less than the output.
func TestRepoVerdictCost(t *testing.T) {
	testutil.RequireBwrap(t)
	e := newEnv(t, time.Hour)
	repo := pyRepo(t)
	cfg := e.repoConfig(t)
	cfg.Concurrency = 1
	start(t, cfg)
	var total, tests time.Duration
	const n = 3
	for i := 0; i < n; i++ {
		began := time.Now()
		rid := e.create(t, 1, store.RolloutConfig{TimeoutSeconds: 120}, repoTask(t, repo, map[string]any{"cmds": []string{fixCmd}}))[0]
		r := e.wait(t, []string{rid}, 2*time.Minute)[0]
		total += time.Since(began)
		if r.Reward == nil || *r.Reward != 1 {
			t.Fatalf("reward %s, want 1 (%s)", fmtPtr(r.Reward), r.Error)
		}
		var te struct {
			Duration float64 `json:"duration_s"`
		}
		e.one(t, rid, store.EventTests, &te)
		tests += time.Duration(te.Duration * float64(time.Second))
	}
	t.Logf("per evaluation: attempt %s, test command %s (mean of %d)", total/n, tests/n, n)

	flood := "head -c 73400320 /dev/zero | tr '\\0' '\\n'; " + testCmd
	before := maxRSS(t)
	rid := e.create(t, 1, store.RolloutConfig{TimeoutSeconds: 120}, repoTask(t, repo, map[string]any{"cmds": []string{fixCmd}, "test_command": flood}))[0]
	r := e.wait(t, []string{rid}, 2*time.Minute)[0]
	after := maxRSS(t)
	t.Logf("peak RSS %d MiB before the flood, %d MiB after (reward %s)", before>>20, after>>20, fmtPtr(r.Reward))
	if r.Reward == nil || *r.Reward != 1 {
		t.Errorf("reward %s under the flood, want 1 (%s)", fmtPtr(r.Reward), r.Error)
	}
	if grew := after - before; grew > 32<<20 {
		t.Errorf("the controller's peak RSS grew by %d MiB under 70 MiB of test output, want under 32 MiB", grew>>20)
	}
}
