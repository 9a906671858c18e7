//go:build linux

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/store"
)

// TestSandboxRepoTasks runs repository tasks with the built binary: `agl
// gateway`, `agl controller --config` with a sandbox section, the harness
// running the model's commands through AGL_SANDBOX_EXEC (which is `agl
// sandbox exec`); the hidden tests decide the rewards.
func TestSandboxRepoTasks(t *testing.T) {
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
	addr := testutil.FreeAddr(t)
	gw := startGateway(t, bin, t.TempDir(), addr)
	defer func() { gw.Process.Kill(); gw.Wait() }()
	ctl, _ := filepath.Abs("../../controller/testdata")
	dir := t.TempDir()
	cfg := `gateway:
  admin_key: crash-key
controller:
  command: [python3, repo_harness.py]
  dir: ` + ctl + `
  poll_interval: 50ms
  sandbox:
    timeout: 20s
    memory_bytes: 536870912
    processes: 64
    disk_bytes: 67108864
    output_bytes: 4096
    env: {PYTHONDONTWRITEBYTECODE: "1"}
    keep_workspaces: kept
  tests:
    timeout: 60s
`
	cfgPath := filepath.Join(dir, "agl.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	task := func(cmd string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{
			"id": "calc", "repo": "pyrepo", "problem_statement": "add returns the difference",
			"test_command": "python3 -m unittest -v {tests}", "hidden_files": []string{"tests"},
			"fail_to_pass": []string{"tests.test_calc.TestCalc.test_add"}, "pass_to_pass": []string{"tests.test_calc.TestCalc.test_mul"},
			"cmds": []string{"echo env=$PYTHONDONTWRITEBYTECODE", "head -c 50000 /dev/zero | tr '\\0' y", cmd},
		})
		return b
	}
	c := api.NewClient("http://"+addr, "crash-key")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rs, err := c.CreateRollouts(ctx, []store.NewRollout{
		{Task: task("sed -i 's/return a - b/return a + b/' calc.py")},
		{Task: task("echo no fix")},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctlCmd := exec.CommandContext(ctx, bin, "controller", "--config", cfgPath, "--gateway", "http://"+addr, "--concurrency", "2")
	ctlCmd.Stderr = os.Stderr
	if err := ctlCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { ctlCmd.Process.Kill(); ctlCmd.Wait() }()
	for i, want := range []float64{1, 0} {
		var r store.Rollout
		for {
			if r, err = c.GetRollout(ctx, rs[i].ID); err != nil {
				t.Fatal(err)
			}
			if r.Status.Terminal() {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if r.Status != store.RolloutSucceeded || r.Reward == nil || *r.Reward != want {
			t.Errorf("rollout %d: %s (%s), reward %v, want %g", i, r.Status, r.Error, r.Reward, want)
		}
		evs, err := c.ListEvents(ctx, store.EventFilter{RolloutID: r.ID, Types: []string{store.EventLog, store.EventSandbox}})
		if err != nil {
			t.Fatal(err)
		}
		var all strings.Builder
		for _, e := range evs {
			all.Write(e.Data)
		}
		for _, s := range []string{`env=1`, "stdout truncated at 4096 bytes", `"output":1`, `"commands":3`} {
			if !strings.Contains(all.String(), s) {
				t.Errorf("rollout %d: events lack %q: %s", i, s, all.String())
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "kept", r.ID+"-"+r.Attempts[0].ID, "calc.py")); err != nil {
			t.Errorf("workspace not kept: %v", err)
		}
	}
}

// BenchmarkSandboxExec is the cost of one command through AGL_SANDBOX_EXEC
// (the built `agl sandbox exec`: the agl binary's start, then the
// sandbox) against the same command run directly.
func BenchmarkSandboxExec(b *testing.B) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		b.Skip("bubblewrap (bwrap) is not installed")
	}
	bin, err := buildAgl()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	spec := filepath.Join(dir, "spec.json")
	os.WriteFile(spec, []byte(`{"workspace":"`+ws+`"}`), 0o600)
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("bash", "-c", "true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("agl-sandbox-exec", func(b *testing.B) {
		for b.Loop() {
			if out, err := exec.Command(bin, "sandbox", "exec", "--spec", spec, "--", "bash", "-c", "true").CombinedOutput(); err != nil {
				b.Fatal(err, string(out))
			}
		}
	})
}
