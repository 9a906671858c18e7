//go:build linux

package swe

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

// TestCLIConfigs runs the example's own agl.codex.yaml and agl.claude.yaml
// (their controller and proxy sections as agl train reads them; cli.py
// starting the real pinned CLI inside the sandbox) on a generated task,
// with a scripted model behind a real gateway: the CLI's shell tool runs
// the solution's fix (reward 1 from the hidden tests) or a wrong
// one (reward 0).
func TestCLIConfigs(t *testing.T) {
	testutil.RequireBwrap(t)
	// cli.py in the example's configs runs the CLIs from .cache/npm-clis.
	testutil.CLIs(t, "claude", "codex")
	ml := testutil.ChatML(t, "qwen3")
	dir := generate(t)
	tk, dm := demoTask(t, dir)
	fix := bashBlock(t, dm.Messages[4].Content)
	if !strings.Contains(fix, "sed -i") {
		t.Fatalf("the solution's fix is %q, want a sed command", fix)
	}
	line := taskLine(t, dir, tk.ID)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cwd, _ := os.Getwd()
	tool := func(cli, cmd string) chat.Message {
		q, _ := json.Marshal(cmd)
		if cli == "claude" {
			return chat.Message{Role: chat.RoleAssistant, Content: "I'll fix it.", ToolCalls: []chat.ToolCall{{Name: "Bash", Arguments: `{"command": ` + string(q) + `, "description": "Fix the bug"}`}}}
		}
		return chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{Name: "exec_command", Arguments: `{"cmd": ` + string(q) + `}`}}}
	}
	mutated := filepath.Join(tk.Repo, muts(t, dir)[tk.ID].File)
	orig, err := os.ReadFile(filepath.Join("lib", muts(t, dir)[tk.ID].File))
	if err != nil {
		t.Fatal(err)
	}
	for _, cli := range []string{"codex", "claude"} {
		t.Run(cli, func(t *testing.T) {
			c, err := config.Load("agl." + cli + ".yaml")
			if err != nil {
				t.Fatal(err)
			}
			var sec controller.Section
			var pc proxy.Config
			if err := c.Section("controller", &sec); err != nil {
				t.Fatal(err)
			}
			if err := c.Section("proxy", &pc); err != nil {
				t.Fatal(err)
			}
			if err := pc.Validate(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agl.db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			eng := &testutil.ScriptEngine{Tmpl: ml, ModelVersion: 1, Rendered: true}
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			const admin = "admin-key-for-the-swe-cli-test"
			srv := httptest.NewServer(gateway.New(gateway.Options{Store: st, AdminKey: admin, Logger: quiet,
				LLM: proxy.New(pc, st, proxy.NewTokenBackend(eng, ml, ml.Tokenizer(), 0))}))
			defer srv.Close()
			cfg := sec.Config(cwd)
			cfg.GatewayURL, cfg.AdminKey, cfg.Agl, cfg.Logger = srv.URL, admin, exe, quiet
			cfg.HeartbeatInterval, cfg.PollInterval = 200*time.Millisecond, 50*time.Millisecond
			cfg.Sandbox.KeepWorkspaces = t.TempDir()
			cctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- controller.Run(cctx, cfg) }()
			defer func() { stop(); <-done }()
			for _, tc := range []struct {
				name string
				cmd  string
				want float64
			}{
				{"fix", fix, 1},
				{"wrong fix", "echo '# not the fix' >> " + filepath.Base(mutated), 0},
			} {
				t.Run(tc.name, func(t *testing.T) {
					eng.Script(tool(cli, tc.cmd), chat.Message{Role: chat.RoleAssistant, Content: "Done: fixed."})
					rs, err := st.CreateRollouts(ctx, []store.NewRollout{{Task: json.RawMessage(line), Mode: store.ModeTrain,
						Config: store.RolloutConfig{TimeoutSeconds: 300}}})
					if err != nil {
						t.Fatal(err)
					}
					r := waitRollout(t, ctx, st, rs[0].ID)
					evs, err := st.ListEvents(ctx, store.EventFilter{RolloutID: r.ID})
					if err != nil {
						t.Fatal(err)
					}
					var logs, testsEv string
					calls := 0
					for _, e := range evs {
						switch e.Type {
						case store.EventLog:
							logs += string(e.Data) + "\n"
						case store.EventTests:
							testsEv = string(e.Data)
						case store.EventModelRequest:
							calls++
						}
					}
					if r.Status != store.RolloutSucceeded || r.Reward == nil || *r.Reward != tc.want {
						t.Fatalf("rollout %s (%s) reward %s, want %g\ntests: %s\nlogs:\n%s", r.Status, r.Error, fmtReward(r.Reward), tc.want, testsEv, logs)
					}
					if calls != 2 {
						t.Errorf("%d model calls, want 2 (the tool call, the answer)", calls)
					}
					// The CLI ran the model's command in the workspace.
					final, err := os.ReadFile(filepath.Join(cfg.Sandbox.KeepWorkspaces, r.ID+"-"+r.Attempts[0].ID, filepath.Base(mutated)))
					if err != nil {
						t.Fatal(err)
					}
					if fixed := string(final) == string(orig); fixed != (tc.want == 1) {
						t.Errorf("final %s equals the library's: %v, want %v", filepath.Base(mutated), fixed, tc.want == 1)
					}
					left := eng.Left()
					if left != 0 {
						t.Errorf("%d scripted replies left", left)
					}
				})
			}
		})
	}
}

// demoTask is a train task with its solution (look at the line, swap its
// operator back, submit).
func demoTask(t *testing.T, dir string) (task, demo) {
	t.Helper()
	ms := muts(t, dir)
	for _, x := range testutil.ReadJSONL[task](t, filepath.Join(dir, "train.jsonl")) {
		if s := ms[x.ID].Solution; s != nil {
			return x, *s
		}
	}
	t.Fatal("no train task with its demonstration")
	return task{}, demo{}
}

func muts(t *testing.T, dir string) map[string]mutation {
	t.Helper()
	m := map[string]mutation{}
	for _, x := range testutil.ReadJSONL[mutation](t, filepath.Join(dir, "mutations.jsonl")) {
		m[x.ID] = x
	}
	return m
}

// taskLine is the task's line of train.jsonl, as agl train sends it.
func taskLine(t *testing.T, dir, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "train.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `"id": "`+id+`"`) {
			return l
		}
	}
	t.Fatalf("no task %s", id)
	return ""
}

// bashBlock is the command of a reply that is one ```bash block.
func bashBlock(t *testing.T, reply string) string {
	t.Helper()
	s, ok := strings.CutPrefix(reply, "```bash\n")
	if !ok || !strings.HasSuffix(s, "\n```") {
		t.Fatalf("not one bash block: %q", reply)
	}
	return strings.TrimSuffix(s, "\n```")
}

func waitRollout(t *testing.T, ctx context.Context, st store.Store, id string) store.Rollout {
	t.Helper()
	for {
		r, err := st.GetRollout(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Terminal() {
			return r
		}
		if ctx.Err() != nil {
			t.Fatal("rollout did not finish")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func fmtReward(r *float64) string {
	if r == nil {
		return "none"
	}
	b, _ := json.Marshal(*r)
	return string(b)
}
