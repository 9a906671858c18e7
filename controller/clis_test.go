//go:build linux

package controller_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// TestCLIsInsideSandbox: the real Claude Code and Codex CLIs run as the
// harness inside the sandbox (sandbox.harness: inside), reaching only
// their attempt's model routes; the scripted model sends a fixing command
// in the CLI's own shell tool (reward 1 from the hidden tests) or a wrong
// fix (reward 0).
func TestCLIsInsideSandbox(t *testing.T) {
	testutil.RequireBwrap(t)
	bins := testutil.CLIs(t, "claude", "codex")
	ml := testutil.ChatML(t, "qwen3")
	eng := &testutil.ScriptEngine{Tmpl: ml, ModelVersion: 1, Rendered: true}
	e := newEnvLLM(t, time.Hour, proxy.NewTokenBackend(eng, ml, ml.Tokenizer(), 0))
	repo := pyRepo(t)
	wrong := "sed -i 's/return a - b/return a * b/' calc.py"
	tool := func(cli, cmd string) chat.Message {
		q, _ := json.Marshal(cmd)
		if cli == "claude" {
			return chat.Message{Role: chat.RoleAssistant, Content: "I'll fix calc.py.", ToolCalls: []chat.ToolCall{{Name: "Bash", Arguments: `{"command": ` + string(q) + `, "description": "Fix add"}`}}}
		}
		return chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{Name: "exec_command", Arguments: `{"cmd": ` + string(q) + `}`}}}
	}
	cases := []struct {
		cli, name, cmd string
		want           float64
		line           string // in the final calc.py
	}{
		{"claude", "fix", fixCmd, 1, "return a + b"},
		{"claude", "wrong fix", wrong, 0, "return a * b\n\n\ndef mul"},
		{"codex", "fix", fixCmd, 1, "return a + b"},
		{"codex", "wrong fix", wrong, 0, "return a * b\n\n\ndef mul"},
	}
	for _, c := range cases {
		t.Run(c.cli+" "+c.name, func(t *testing.T) {
			eng.Push(tool(c.cli, c.cmd), chat.Message{Role: chat.RoleAssistant, Content: "Done: add is fixed."})
			rid := e.create(t, 1, store.RolloutConfig{TimeoutSeconds: 240}, repoTask(t, repo, nil))[0]
			cfg := e.repoConfig(t)
			script, _ := filepath.Abs(filepath.Join("testdata", c.cli+"_inside.sh"))
			cfg.Command = []string{"sh", script}
			cfg.Sandbox.Harness = controller.HarnessInside
			cfg.Sandbox.ReadOnly = []string{filepath.Dir(filepath.Dir(bins))} // node_modules
			cfg.Sandbox.Limits.MemoryBytes = 4 << 30
			cfg.Sandbox.Limits.Processes = 512
			cfg.Sandbox.Limits.DiskBytes = 512 << 20
			cfg.Env = []string{"AGL_CLAUDE=" + filepath.Join(bins, "claude"), "AGL_CODEX=" + filepath.Join(bins, "codex"),
				"CLAUDE_CONFIG_DIR=/tmp/.claude", "DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1",
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
			stop := start(t, cfg)
			r := e.wait(t, []string{rid}, 4*time.Minute)[0]
			stop()
			out := logText(t, e.events(t, rid, store.EventLog), "stdout")
			errs := logText(t, e.events(t, rid, store.EventLog), "stderr")
			if r.Status != store.RolloutSucceeded {
				t.Fatalf("rollout %s: %s\nstdout:\n%s\nstderr:\n%s", r.Status, r.Error, out, errs)
			}
			if r.Reward == nil || *r.Reward != c.want {
				var te testsEvent
				e.one(t, rid, store.EventTests, &te)
				t.Errorf("reward %s, want %g (tests: %s)\nstdout:\n%s\nstderr:\n%s", fmtPtr(r.Reward), c.want, te.Reason, out, errs)
			}
			// The CLI ran the model's command in the workspace.
			calc, err := os.ReadFile(filepath.Join(cfg.Sandbox.KeepWorkspaces, rid+"-"+r.Attempts[0].ID, "calc.py"))
			if err != nil || !strings.Contains(string(calc), c.line) {
				t.Errorf("final calc.py lacks %q (%v):\n%s", c.line, err, calc)
			}
			if n := len(e.events(t, rid, store.EventModelRequest)); n != 2 {
				t.Errorf("%d model_request events, want 2 (the tool call, the answer)", n)
			}
		})
	}
}
