package controller_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/controller"
)

// TestSection: the controller section of agl.yaml decodes strictly, and a
// relative dir is relative to the config file.
func TestSection(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agl.yaml")
	yml := `
controller:
  command: [python3, harness.py]
  dir: harness
  env: {B: "2", A: "1"}
  concurrency: 3
  mode: val
  evaluator: [sh, -c, "echo 1"]
  reward_source: both
  heartbeat_interval: 2s
  kill_grace: 250ms
`
	if err := os.WriteFile(path, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var s controller.Section
	if err := c.Section("controller", &s); err != nil {
		t.Fatal(err)
	}
	got := s.Config(filepath.Dir(path))
	if !slices.Equal(got.Command, []string{"python3", "harness.py"}) || got.Dir != filepath.Join(dir, "harness") ||
		!slices.Equal(got.Env, []string{"A=1", "B=2"}) || got.Concurrency != 3 || got.Mode != "val" ||
		len(got.Evaluator) != 3 || got.RewardSource != controller.RewardBoth || got.HeartbeatInterval != 2*time.Second || got.KillGrace != 250*time.Millisecond {
		t.Errorf("config %+v", got)
	}
	if err := os.WriteFile(path, []byte("controller:\n  comand: [x]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Section("controller", &s); err == nil {
		t.Error("a misspelled key was accepted")
	}
}

// TestSectionSandbox: the sandbox and tests keys of the contract decode
// into the controller's config (keep_workspaces and read_only relative to
// the file).
func TestSectionSandbox(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agl.yaml")
	yml := `
controller:
  command: [python3, harness.py]
  sandbox:
    harness: inside
    timeout: 30s
    cpu_seconds: 40
    memory_bytes: 1073741824
    processes: 128
    disk_bytes: 268435456
    output_bytes: 65536
    read_only: [/opt/tool, ../clis]
    env: {PYTHONDONTWRITEBYTECODE: "1"}
    keep_workspaces: kept
    bwrap: /usr/bin/bwrap
  tests:
    timeout: 120s
    partial_credit: true
    log_tail_bytes: 1000
`
	if err := os.WriteFile(path, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var s controller.Section
	if err := c.Section("controller", &s); err != nil {
		t.Fatal(err)
	}
	got := s.Config(dir)
	sb := got.Sandbox
	if sb.Harness != controller.HarnessInside || sb.Timeout != 30*time.Second || sb.CPUSeconds != 40 || sb.MemoryBytes != 1<<30 ||
		sb.Processes != 128 || sb.DiskBytes != 256<<20 || sb.OutputBytes != 65536 || !slices.Equal(sb.ReadOnly, []string{"/opt/tool", filepath.Join(filepath.Dir(dir), "clis")}) ||
		!slices.Equal(sb.Env, []string{"PYTHONDONTWRITEBYTECODE=1"}) || sb.KeepWorkspaces != filepath.Join(dir, "kept") || sb.Bwrap != "/usr/bin/bwrap" {
		t.Errorf("sandbox %+v", sb)
	}
	if got.Tests.Timeout != 120*time.Second || !got.Tests.PartialCredit || got.Tests.LogTailBytes != 1000 {
		t.Errorf("tests %+v", got.Tests)
	}
	for _, bad := range []string{"controller:\n  sandbox:\n    memory: 1\n", "controller:\n  tests:\n    partial: true\n"} {
		os.WriteFile(path, []byte(bad), 0o644)
		c, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		var s controller.Section
		if err := c.Section("controller", &s); err == nil {
			t.Errorf("%q: a misspelled key was accepted", bad)
		}
	}
}
