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
