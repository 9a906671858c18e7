//go:build linux

package controller_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/store"
)

// sweepHarness starts a detached child (setsid sleep, from a subshell that
// exits at once: the child is orphaned while the harness runs on) and
// records its pid in $PIDS/<role>; the "long" harness then waits for
// $PIDS/release and records whether its child was still alive then.
const sweepHarness = `role=$(echo "$AGL_TASK" | sed 's/.*"role":"\([a-z]*\)".*/\1/')
( setsid sleep 60 >/dev/null 2>&1 < /dev/null & echo $! > "$PIDS/$role" )
if [ "$role" = long ]; then
  i=0; while [ ! -e "$PIDS/release" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
  if kill -0 "$(cat "$PIDS/long")" 2>/dev/null; then echo alive > "$PIDS/long.status"; else echo dead > "$PIDS/long.status"; fi
fi
`

func pidAlive(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no pid recorded: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("pid %q", b)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// TestSweepKillsDetachedChildren: a child that left the harness's process
// group (setsid) dies with its attempt, while another attempt running
// concurrently keeps its own detached child until it ends.
func TestSweepKillsDetachedChildren(t *testing.T) {
	e := newEnv(t, -1)
	pids := t.TempDir()
	long := e.create(t, 1, store.RolloutConfig{}, `{"role":"long"}`)
	time.Sleep(10 * time.Millisecond)
	short := e.create(t, 1, store.RolloutConfig{}, `{"role":"short"}`)
	cfg := e.config("sh", "-c", sweepHarness)
	cfg.Concurrency = 2
	cfg.Env = []string{"PIDS=" + pids}
	start(t, cfg)
	e.wait(t, short, 10*time.Second)
	if pidAlive(t, filepath.Join(pids, "short")) {
		t.Error("the short attempt's detached child outlived it")
	}
	if err := os.WriteFile(filepath.Join(pids, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.wait(t, long, 15*time.Second)
	if b, _ := os.ReadFile(filepath.Join(pids, "long.status")); strings.TrimSpace(string(b)) != "alive" {
		t.Errorf("the long attempt's child was %q while it ran, want alive (another attempt's sweep killed it)", b)
	}
	if pidAlive(t, filepath.Join(pids, "long")) {
		t.Error("the long attempt's detached child outlived it")
	}
}

// TestRewardSourceConfig: the reward source must fit the evaluator.
func TestRewardSourceConfig(t *testing.T) {
	e := newEnv(t, -1)
	cases := []struct {
		source    string
		evaluator []string
		err       string
	}{
		{"harness", []string{"true"}, "never runs the evaluator"},
		{"evaluator", nil, "needs an evaluator"},
		{"both", nil, "needs an evaluator"},
		{"judge", nil, `reward_source "judge"`},
	}
	for _, tc := range cases {
		cfg := e.config("true")
		cfg.RewardSource, cfg.Evaluator = tc.source, tc.evaluator
		err := controller.Run(t.Context(), cfg)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s with evaluator %v: %v, want %q", tc.source, tc.evaluator, err, tc.err)
		}
	}
}

// TestSweepForkBombSparesOthers: a harness leaves a fork-bombing sandbox
// behind (detached, still running when the harness exits); the sweep
// ends it, while unrelated processes the test starts meanwhile — some of
// them likely on pids the bomb cycled through — are untouched.
func TestSweepForkBombSparesOthers(t *testing.T) {
	testutil.RequireBwrap(t)
	e := newEnv(t, time.Hour)
	pids := t.TempDir()
	id := e.create(t, 1, store.RolloutConfig{TimeoutSeconds: 60}, repoTask(t, pyRepo(t), nil))[0]
	cfg := e.repoConfig(t)
	cfg.Command = []string{"sh", "-c", `( setsid "$AGL_SANDBOX_EXEC" bash -c ':(){ :|:& };:; sleep 30' >/dev/null 2>&1 < /dev/null & echo $! > "$PIDS/exec" )
sleep 2`}
	cfg.Env = []string{"PIDS=" + pids}
	var others []*exec.Cmd
	spawn := func() {
		c := exec.Command("sleep", "120")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		others = append(others, c)
	}
	defer func() {
		for _, c := range others {
			c.Process.Kill()
			c.Wait()
		}
	}()
	for range 10 {
		spawn()
	}
	start(t, cfg)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r, err := e.st.GetRollout(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Terminal() {
			if r.Status != store.RolloutSucceeded || r.Reward == nil || *r.Reward != 0 {
				t.Fatalf("rollout %s (%s), reward %s; want succeeded with 0", r.Status, r.Error, fmtPtr(r.Reward))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the attempt did not end")
		}
		if len(others) < 200 {
			spawn()
		}
		time.Sleep(10 * time.Millisecond)
	}
	if pidAlive(t, filepath.Join(pids, "exec")) {
		t.Error("the left-behind sandbox outlived its attempt")
	}
	for _, c := range others {
		if err := syscall.Kill(c.Process.Pid, 0); err != nil {
			t.Fatalf("an unrelated process (pid %d) was killed: %v", c.Process.Pid, err)
		}
	}
	t.Logf("%d unrelated processes untouched", len(others))
}
