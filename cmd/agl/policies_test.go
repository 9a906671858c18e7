package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/app"
	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/model"
	"github.com/aglrl/agl/model/safetensors"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/trainer"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// harnessEnv makes the test binary run a harness instead of the tests
// (the controller starts it as a subprocess).
const harnessEnv = "AGL_TEST_HARNESS"

func TestMain(m *testing.M) {
	if os.Getenv(harnessEnv) == "agents" {
		if err := agentsHarness(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "harness:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(runInOwnTemp(m))
}

// runInOwnTemp runs the tests with TMPDIR set to a directory of their own,
// removed afterwards: the crash tests SIGKILL agl processes, which then
// leave their attempt directories behind, and those must not pile up in
// the machine's /tmp.
func runInOwnTemp(m *testing.M) int {
	dir, err := os.MkdirTemp("", "aglt")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Setenv("TMPDIR", dir)
	return m.Run()
}

// agentsHarness is a three-agent harness on the real openai-go SDK: the
// writer names itself by a per-agent base URL, the checker by the
// X-Agl-Agent header, the rewriter by its model name (proxy.agents), a
// judge (served by an upstream) by its base URL too. The
// checker first answers a fixed prompt greedily (the same call in every
// rollout: its answer shows whether its weights moved). The writer's call
// gets a per-call reward; the outcome goes to the reward file.
func agentsHarness(ctx context.Context) error {
	var task struct{ Letter string }
	if err := json.Unmarshal([]byte(os.Getenv("AGL_TASK")), &task); err != nil {
		return err
	}
	base, key := os.Getenv("OPENAI_BASE_URL"), os.Getenv("OPENAI_API_KEY")
	opts := []option.RequestOption{option.WithAPIKey(key), option.WithMaxRetries(3)}
	writer := openai.NewClient(append(opts, option.WithBaseURL(strings.TrimSuffix(base, "/v1")+"/agents/writer/v1"))...)
	checker := openai.NewClient(append(opts, option.WithBaseURL(base), option.WithHeader("X-Agl-Agent", "checker"))...)
	rewriter := openai.NewClient(append(opts, option.WithBaseURL(base))...)
	judge := openai.NewClient(append(opts, option.WithBaseURL(strings.TrimSuffix(base, "/v1")+"/agents/judge/v1"))...)
	ask := func(c openai.Client, model, content string, greedy bool) (*openai.ChatCompletion, error) {
		p := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(4),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(content)}}
		if greedy {
			p.Temperature = openai.Float(0)
		}
		return c.Chat.Completions.New(ctx, p)
	}
	if _, err := ask(checker, "agl", "check a fixed query", true); err != nil {
		return fmt.Errorf("checker: %w", err)
	}
	w, err := ask(writer, "agl", "letter "+task.Letter, false)
	if err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	draft := w.Choices[0].Message.Content
	if _, err := ask(checker, "agl", "check "+draft, false); err != nil {
		return fmt.Errorf("checker: %w", err)
	}
	r, err := ask(rewriter, "rewriter-model", "fix "+draft, false)
	if err != nil {
		return fmt.Errorf("rewriter: %w", err)
	}
	final := r.Choices[0].Message.Content
	if _, err := ask(judge, "agl", "judge "+final, false); err != nil {
		return fmt.Errorf("judge: %w", err)
	}
	callReward := 0.0
	if strings.Contains(draft, task.Letter) {
		callReward = 0.5
	}
	ev, _ := json.Marshal(map[string]any{"type": "reward", "data": map[string]any{"value": callReward, "call_id": w.ID}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, os.Getenv("AGL_EVENTS_URL"), bytes.NewReader(ev))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("reward event: %s", resp.Status)
	}
	outcome := 0.0
	for _, c := range final {
		if 'a' <= c && c <= 'z' {
			outcome++
		}
	}
	outcome /= math.Max(float64(len(final)), 1)
	if strings.Contains(final, task.Letter) {
		outcome = 1
	}
	return os.WriteFile(os.Getenv("AGL_REWARD_FILE"), []byte(fmt.Sprint(outcome)), 0o644)
}

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestTrainPolicies runs `agl train` with three policies over the
// openai-go harness above: writer and rewriter trained (each its own
// weights, optimizer, versions, checkpoint), checker frozen on the same
// model dir, a judge on an upstream (a loopback vLLM-format server). Each
// step trains the writer's and the rewriter's tokens only,
// each on its own policy; every call's event names the policy and version
// that answered it; the frozen checker answers its fixed greedy prompt
// identically from the first rollout to the last validation and its
// weights file is unchanged; a --resume continues each trained policy from
// its own checkpoint (weights, optimizer step, version).
func TestTrainPolicies(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	up := vllmUpstream(t)
	cfgPath := trainDir(t, ctx, dir, "testdata/agents_harness.py", 6, func(string) string {
		return fmt.Sprintf(`data_dir: run
policies:
  writer: {kind: trained, model_dir: model, agents: [writer]}
  rewriter: {kind: trained, model_dir: model, agents: [rewriter]}
  checker: {kind: frozen, model_dir: model, agents: [checker]}
  judge: {kind: upstream, agents: [judge], upstream: {models: [{name: m, endpoints: [%q]}]}}
proxy:
  agents: {rewriter-model: rewriter}
controller:
  command: [%q]
  env: {%s: agents}
  concurrency: 4
trainer:
  tasks: tasks.jsonl
  val_fraction: 0.34
  steps: 1
  tasks_per_step: 2
  group_size: 4
  lr: 0.01
  credit: per_call
  # Every step updates both trained policies (groups whose rewards are
  # all equal train with advantage 0 rather than being left out), so the
  # versions and optimizer steps below do not depend on the rewards.
  drop_uniform_groups: false
  rollout: {timeout_seconds: 120, max_attempts: 2}
`, up.URL+"/v1", self, harnessEnv)
	})
	modelFile := filepath.Join(dir, "model", "model.safetensors")
	before := fileHash(t, modelFile)
	var out bytes.Buffer
	if err := run(ctx, []string{"train", cfgPath}, &out, &out); err != nil {
		t.Fatalf("train: %v\n%s", err, out.String())
	}
	if err := run(ctx, []string{"train", "--resume", "--steps", "2", cfgPath}, &out, &out); err != nil {
		t.Fatalf("resume: %v\n%s", err, out.String())
	}
	t.Logf("train output:\n%s", out.String())
	if fileHash(t, modelFile) != before {
		t.Errorf("the model dir's weights changed")
	}
	run := filepath.Join(dir, "run")
	ckpt := trainer.CheckpointDir(run)
	state, err := trainer.LoadState(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	if state.Step != 2 || len(state.Versions) != 2 || state.Versions["writer"] < 2 || state.Versions["rewriter"] < 2 {
		t.Fatalf("checkpoint state %+v: want step 2 and versions of writer and rewriter", state)
	}
	for _, p := range []string{"writer", "rewriter"} {
		pdir := filepath.Join(ckpt, trainer.PolicyDir(p))
		f, err := safetensors.ReadFile(filepath.Join(pdir, model.OptimizerFile))
		if err != nil {
			t.Fatalf("policy %s checkpoint: %v", p, err)
		}
		// The optimizer's step counts the updates of both runs: the
		// resumed run continued the checkpoint's optimizer state.
		if want := fmt.Sprint(state.Versions[p] - 1); f.Metadata["step"] != want {
			t.Errorf("policy %s: optimizer step %s, want %s (its updates over both runs)", p, f.Metadata["step"], want)
		}
		if fileHash(t, filepath.Join(pdir, "model.safetensors")) == before {
			t.Errorf("policy %s: checkpoint weights equal the initial ones", p)
		}
	}
	if _, err := os.Stat(filepath.Join(ckpt, trainer.PolicyDir("checker"))); !os.IsNotExist(err) {
		t.Errorf("the frozen checker has a checkpoint: %v", err)
	}

	// Metrics: each step trains the writer's and rewriter's tokens only,
	// each policy its own.
	b, err := os.ReadFile(filepath.Join(run, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var steps []trainer.StepMetrics
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m trainer.StepMetrics
		if json.Unmarshal([]byte(line), &m) == nil && m.Mode == "train" {
			steps = append(steps, m)
		}
	}
	if len(steps) != 2 {
		t.Fatalf("%d train steps in metrics", len(steps))
	}
	for _, m := range steps {
		by := m.TrainedByAgent
		if by["checker"] != 0 || by["judge"] != 0 || by["writer"]+by["rewriter"] != m.TrainedTokens || m.TrainedTokens == 0 {
			t.Errorf("step %d: trained %d tokens, by agent %v", m.Step, m.TrainedTokens, by)
		}
		for _, p := range []string{"writer", "rewriter"} {
			if pm := m.Policies[p]; pm.TrainedTokens != by[p] {
				t.Errorf("step %d: policy %s trained %d tokens, its agent %d", m.Step, p, pm.TrainedTokens, by[p])
			}
		}
		if _, ok := m.Policies["checker"]; ok {
			t.Errorf("step %d: the frozen checker has step metrics", m.Step)
		}
	}
	// startVersion is the version a trained policy served step s with: 1,
	// then its version after step s-1 (unchanged by a step in which all
	// its groups had equal rewards, so nothing trained).
	startVersion := func(policy string, s int) int64 {
		v := int64(1)
		for _, m := range steps {
			if m.Step < s {
				v = m.Policies[policy].Version
			}
		}
		return v
	}

	// Events: each call is answered by its agent's policy; the trained
	// ones by the version their step started from; the frozen checker by
	// v1, identically for its fixed prompt in every rollout.
	st, err := app.OpenStore(ctx, config.Config{DataDir: run}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rs, _, err := st.ListRollouts(ctx, store.RolloutFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var fixed *api.ModelCall
	fixedCalls, judgeCalls := 0, 0
	agentOf := map[string]string{} // rollout/call id → agent
	for _, r := range rs {
		evs, err := st.ListEvents(ctx, store.EventFilter{RolloutID: r.ID, Types: []string{store.EventModelRequest}})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			var mc api.ModelCall
			if err := json.Unmarshal(e.Data, &mc); err != nil {
				t.Fatal(err)
			}
			agentOf[r.ID+"/"+mc.CallID] = mc.Agent
			if want := map[string]string{"judge": "m"}[mc.Agent]; mc.Model != mc.Agent && mc.Model != want {
				t.Errorf("%s: agent %s's call answered by %s", r.ID, mc.Agent, mc.Model)
			}
			var step struct{ Step int }
			json.Unmarshal(r.Metadata, &step)
			if mc.Agent == "judge" {
				judgeCalls++
			}
			if mc.Agent == "judge" && (len(mc.ResponseIDs) != 1 || mc.ResponseIDs[0] != 7) {
				t.Errorf("%s: the judge's call did not reach the upstream: %+v", r.ID, mc.ResponseIDs)
			}
			if mc.Agent == "checker" && mc.ModelVersion != 1 {
				t.Errorf("%s: the frozen checker answered as v%d", r.ID, mc.ModelVersion)
			}
			if (mc.Agent == "writer" || mc.Agent == "rewriter") && r.Mode == store.ModeTrain && mc.ModelVersion != startVersion(mc.Agent, step.Step) {
				t.Errorf("%s (step %d): %s answered as v%d, want v%d", r.ID, step.Step, mc.Agent, mc.ModelVersion, startVersion(mc.Agent, step.Step))
			}
			if mc.Agent != "checker" || !bytes.Contains(e.Data, []byte("check a fixed query")) {
				continue
			}
			fixedCalls++
			if fixed == nil {
				fixed = &mc
				continue
			}
			if !slices.Equal(mc.ResponseIDs, fixed.ResponseIDs) || !slices.Equal(mc.ResponseLogprobs, fixed.ResponseLogprobs) {
				t.Errorf("%s: the frozen checker answered its fixed prompt %v %v, earlier %v %v", r.ID,
					mc.ResponseIDs, mc.ResponseLogprobs, fixed.ResponseIDs, fixed.ResponseLogprobs)
			}
		}
	}
	// Each step recorded the advantage of every trained call: the writer's
	// and the rewriter's, never the checker's.
	for _, m := range steps {
		n := 0
		for rid, calls := range m.Advantages {
			for cid := range calls {
				if a := agentOf[rid+"/"+cid]; a != "writer" && a != "rewriter" {
					t.Errorf("step %d: advantage recorded for %s/%s of agent %q", m.Step, rid, cid, a)
				}
				n++
			}
		}
		if n == 0 {
			t.Errorf("step %d recorded no advantages", m.Step)
		}
	}
	if judgeCalls != fixedCalls {
		t.Errorf("%d judge calls, %d rollouts", judgeCalls, fixedCalls)
	}
	if fixedCalls < 2*8+3 {
		t.Errorf("%d fixed checker calls, want one per rollout", fixedCalls)
	}
}

// TestTrainRefusesPolicies: `agl train` refuses a policies section it
// cannot serve or train, naming what is wrong, before it creates the data
// dir: agents mapped to no policy (by proxy.agents), an agent in two
// policies, unknown kinds, missing model dirs or upstreams, nothing to
// train, and settings that contradict the policies.
func TestTrainRefusesPolicies(t *testing.T) {
	const trained = "  w: {kind: trained, model_dir: model, agents: [writer]}\n"
	tests := []struct {
		name, policies, extra, want string
	}{
		{"agent mapped to no policy", trained, "proxy:\n  agents: {gpt-4o: checker}\n", `proxy.agents["gpt-4o"]: agent "checker" is mapped to no policy`},
		{"agent in two policies", trained + "  c: {kind: frozen, model_dir: model, agents: [writer]}\n", "", `agent "writer" is in both c and w`},
		{"unknown kind", trained + "  c: {kind: frozen2, model_dir: model, agents: [checker]}\n", "", `policies.c: kind "frozen2"`},
		{"no model dir", trained + "  c: {kind: frozen, agents: [checker]}\n", "", "policies.c: a frozen policy needs model_dir"},
		{"no upstream", trained + "  c: {kind: upstream, agents: [checker]}\n", "", "policies.c: an upstream policy needs upstream"},
		{"no agents", trained + "  c: {kind: frozen, model_dir: model}\n", "", "policies.c: no agents"},
		{"bad agent name", "  w: {kind: trained, model_dir: model, agents: [\"a b\"]}\n", "", "policies.w.agents"},
		{"bad policy name", "  \"w/x\": {kind: trained, model_dir: model, agents: [writer]}\n", "", "policies: policy name"},
		{"nothing trained", "  c: {kind: frozen, model_dir: model, agents: [checker]}\n", "", "no policy of kind trained"},
		{"engine model dir too", trained, "engine:\n  model_dir: model\n", "with policies, each policy names its model_dir"},
		{"train_agents too", trained, "", "trainer.train_agents: with policies"},
		{"unknown field", "  w: {kind: trained, model_dir: model, agents: [writer], lr: 1}\n", "", "lr"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tr := "trainer:\n  tasks: tasks.jsonl\n"
			if tc.name == "train_agents too" {
				tr += "  train_agents: [writer]\n"
			}
			cfg := "data_dir: run\ncontroller:\n  command: [\"true\"]\npolicies:\n" + tc.policies + tc.extra + tr
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
