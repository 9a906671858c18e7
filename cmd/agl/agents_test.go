package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/app"
	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/trainer"
)

// TestTrainRefusesUnknownNames: `agl train` refuses unknown estimator,
// aggregation and credit names (and bad agent names) when it loads its
// config, before it creates anything or runs a rollout.
func TestTrainRefusesUnknownNames(t *testing.T) {
	tests := []struct {
		name, trainer, proxy, want string
	}{
		{"estimator", "estimator: grpo2", "", `estimator "grpo2"`},
		{"aggregation", "aggregation: seq-mean", "", `aggregation "seq-mean"`},
		{"credit", "credit: per-call", "", `credit assignment "per-call"`},
		{"gamma", "credit: broadcast\n  gamma: 0.9", "", "needs credit: discounted"},
		{"train agent", "train_agents: [\"a b\"]", "", "train_agents"},
		{"length rule", "length_rule: cut", "", `"cut"`},
		{"dual clip", "ppo_epochs: 2\n  kl_coef: 0.1\n  dual_clip: 0.5", "", "dual_clip 0.5"},
		{"kl_k1", "kl_k1: true", "", "kl_k1 needs kl_coef"},
		{"intermediate rewards with broadcast", "intermediate_rewards: {tool_error: -0.1}", "", "broadcast credit ignores them"},
		{"intermediate reward name", "credit: per_call\n  intermediate_rewards: {tool_errors: -0.1}", "", "tool_errors"},
		{"proxy agent", "credit: last_call", "proxy:\n  agents: {gpt-4o: \"bad/agent\"}\n", "proxy.agents"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := "data_dir: run\nengine:\n  model_dir: model\ncontroller:\n  command: [\"true\"]\n" + tc.proxy +
				"trainer:\n  tasks: tasks.jsonl\n  " + tc.trainer + "\n"
			path := filepath.Join(dir, "agl.yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out bytes.Buffer
			err := run(ctx, []string{"train", path}, &out, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %s\n%s", err, tc.want, out.String())
			}
			if _, err := os.Stat(filepath.Join(dir, "run")); !os.IsNotExist(err) {
				t.Errorf("the data dir was created before the config was refused: %v", err)
			}
		})
	}
}

// TestTrainMultiAgent runs agl train's stack (scriptedRun: a scripted
// engine and policy in place of the model) on a real three-agent Python
// harness (writer by path, checker by header, rewriter by model name) with
// train_agents [writer, rewriter] and credit per_call: every call's event
// names its agent, the step trains tokens of the writer and the rewriter
// only, and the progress line reports the update (gradient norm, KL).
func TestTrainMultiAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 12 rollouts of a Python harness")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfgPath := taskDir(t, dir, "testdata/agents_harness.py", 6, func(harness string) string {
		return fmt.Sprintf(`data_dir: run
proxy:
  agents: {rewriter-model: rewriter}
controller:
  command: [python3, %q]
  concurrency: 4
trainer:
  tasks: tasks.jsonl
  val_fraction: 0.34
  steps: 1
  tasks_per_step: 2
  group_size: 4
  lr: 0.01
  credit: per_call
  train_agents: [writer, rewriter]
  rollout: {timeout_seconds: 60, max_attempts: 2}
`, harness)
	})
	sr := newScriptedRun(t, nil, distinctReplies())
	out, err := sr.train(ctx, cfgPath)
	if err != nil {
		t.Fatalf("train: %v\n%s", err, out)
	}
	t.Logf("train output:\n%s", out)
	if !strings.Contains(out, "step 1/1") || !strings.Contains(out, "gnorm ") || !strings.Contains(out, "kl ") {
		t.Errorf("progress line lacks the update's metrics")
	}
	// agl export: the writer's samples only, per-call credit, each row
	// naming its agent and its calls' response spans.
	var exp, rep bytes.Buffer
	if err := run(ctx, []string{"export", "--data-dir", filepath.Join(dir, "run"), "--credit", "per_call", "--train-agent", "writer"}, &exp, &rep); err != nil {
		t.Fatalf("export: %v\n%s", err, rep.String())
	}
	rows := strings.Split(strings.TrimSpace(exp.String()), "\n")
	for _, line := range rows {
		var r struct {
			Agent      string   `json:"agent"`
			CallIDs    []string `json:"call_ids"`
			CallStarts []int32  `json:"call_starts"`
			CallEnds   []int32  `json:"call_ends"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Agent != "writer" || len(r.CallStarts) != len(r.CallIDs) || len(r.CallEnds) != len(r.CallIDs) {
			t.Fatalf("export row %.200s: %v", line, err)
		}
	}
	if bad := []string{"--credit", "perCall"}; run(ctx, append([]string{"export", "--data-dir", filepath.Join(dir, "run")}, bad...), &exp, &rep) == nil {
		t.Errorf("export accepted --credit perCall")
	}
	st, err := app.OpenStore(ctx, config.Config{DataDir: filepath.Join(dir, "run")}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	responseTokens := map[string]int{}
	for k := 0; k < 2; k++ {
		for j := 0; j < 4; j++ {
			id := fmt.Sprintf("agl-s1-t%d-r%d", k, j)
			evs, err := st.ListEvents(ctx, store.EventFilter{RolloutID: id, Types: []string{store.EventModelRequest}})
			if err != nil {
				t.Fatal(err)
			}
			var agents []string
			for _, e := range evs {
				var mc api.ModelCall
				json.Unmarshal(e.Data, &mc)
				agents = append(agents, mc.Agent)
				responseTokens[mc.Agent] += len(mc.ResponseIDs)
			}
			if strings.Join(agents, ",") != "writer,checker,rewriter" {
				t.Errorf("%s: agents %v, want writer, checker, rewriter", id, agents)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "run", "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var step trainer.StepMetrics
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m trainer.StepMetrics
		if json.Unmarshal([]byte(line), &m) == nil && m.Mode == "train" {
			step = m
		}
	}
	by := step.TrainedByAgent
	if step.Step != 1 || by["checker"] != 0 || len(by) > 2 || by["writer"]+by["rewriter"] != step.TrainedTokens {
		t.Fatalf("step metrics %+v: trained tokens by agent %v", step, by)
	}
	// Groups with equal outcomes and per-call rewards are dropped (zero
	// variance); what trains is all of the selected agents' response tokens.
	if step.TrainedTokens > responseTokens["writer"]+responseTokens["rewriter"] {
		t.Errorf("trained %d tokens, more than the writer's and rewriter's %d", step.TrainedTokens, responseTokens["writer"]+responseTokens["rewriter"])
	}
	if step.TrainedTokens == 0 {
		t.Errorf("nothing trained: %+v", step)
	}
	if step.TrainedTokens > 0 && step.GradNorm == 0 {
		t.Errorf("an update with %d trained tokens reports gradient norm 0", step.TrainedTokens)
	}
	// The policy was given the writer's and the rewriter's samples only.
	if len(sr.pol.steps) != 1 {
		t.Fatalf("the policy took %d steps, want 1", len(sr.pol.steps))
	}
	for _, s := range sr.pol.steps[0] {
		if s.Agent != "writer" && s.Agent != "rewriter" {
			t.Errorf("the policy trained a sample of agent %q", s.Agent)
		}
	}
}
