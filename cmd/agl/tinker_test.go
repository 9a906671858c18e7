package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/app"
	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/trainer"
	"github.com/aglrl/agl/trainer/tinker/tinkertest"
)

// TestTrainTinkerPolicy runs `agl train` with the writer on a tinker
// policy (the loopback stand-in of a Tinker service) beside a frozen
// embedded checker and rewriter and an upstream judge: the writer's
// calls are sampled through the service from the gateway's token ids,
// its samples trained with forward_backward and optim_step, each version
// published with save_weights_for_sampler and checkpointed with
// save_weights; --resume restores it with load_weights.
func TestTrainTinkerPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("trains through a stand-in service")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	up := vllmUpstream(t)
	svc := tinkertest.New("tml-stand-in", 0, 11)
	defer svc.Close()
	cfgPath := tinkerTrainDir(t, ctx, dir, svc, up.URL, self, 1)
	var out bytes.Buffer
	if err := run(ctx, []string{"train", cfgPath}, &out, &out); err != nil {
		t.Fatalf("train: %v\n%s", err, out.String())
	}
	if err := run(ctx, []string{"train", "--resume", "--steps", "2", cfgPath}, &out, &out); err != nil {
		t.Fatalf("resume: %v\n%s", err, out.String())
	}
	t.Logf("train output:\n%s", out.String())
	if bad := svc.MalformedRequests(); len(bad) > 0 {
		t.Fatalf("the stand-in refused requests: %q", bad)
	}
	ckpt := trainer.CheckpointDir(filepath.Join(dir, "run"))
	state, err := trainer.LoadState(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	if state.Step != 2 || state.Versions["writer"] != 3 {
		t.Fatalf("checkpoint state %+v: want step 2 and writer at version 3", state)
	}
	ck, err := os.ReadFile(filepath.Join(ckpt, trainer.PolicyDir("writer"), "tinker.json"))
	if err != nil || !strings.Contains(string(ck), "tinker://") {
		t.Fatalf("writer checkpoint: %v %s", err, ck)
	}
	for path, want := range map[string]int{"/api/v1/create_model": 2, "/api/v1/load_weights": 1, "/api/v1/optim_step": 2} {
		if got := svc.Count(path); got != want {
			t.Errorf("%s: %d calls, want %d", path, got, want)
		}
	}
	if svc.Count("/api/v1/asample") == 0 || svc.Count("/api/v1/forward_backward") < 2 {
		t.Errorf("sample %d, forward_backward %d calls", svc.Count("/api/v1/asample"), svc.Count("/api/v1/forward_backward"))
	}
	if _, err := os.Stat(filepath.Join(ckpt, trainer.PolicyDir("checker"))); !os.IsNotExist(err) {
		t.Errorf("the frozen checker has a checkpoint: %v", err)
	}
	// Every writer call of step s was sampled through the service by the
	// version step s started from (s: every step updates the writer), with
	// a log-prob per token; the frozen checker stays at v1.
	st, err := app.OpenStore(ctx, config.Config{DataDir: filepath.Join(dir, "run")}, newLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rs, _, err := st.ListRollouts(ctx, store.RolloutFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	writerCalls := 0
	for _, r := range rs {
		if r.Mode != store.ModeTrain {
			continue
		}
		var step struct{ Step int }
		json.Unmarshal(r.Metadata, &step)
		evs, err := st.ListEvents(ctx, store.EventFilter{RolloutID: r.ID, Types: []string{store.EventModelRequest}})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			var mc api.ModelCall
			if err := json.Unmarshal(e.Data, &mc); err != nil {
				t.Fatal(err)
			}
			switch mc.Agent {
			case "writer":
				writerCalls++
				if mc.Model != "writer" || mc.ModelVersion != int64(step.Step) || len(mc.ResponseIDs) == 0 || len(mc.ResponseLogprobs) != len(mc.ResponseIDs) {
					t.Errorf("%s (step %d): writer call %s v%d, %d ids, %d logprobs", r.ID, step.Step, mc.Model, mc.ModelVersion, len(mc.ResponseIDs), len(mc.ResponseLogprobs))
				}
			case "checker":
				if mc.ModelVersion != 1 {
					t.Errorf("%s: the frozen checker answered as v%d", r.ID, mc.ModelVersion)
				}
			}
		}
	}
	if writerCalls == 0 {
		t.Error("no writer call recorded")
	}
}

// tinkerTrainDir writes a run of the agents harness with the writer on a
// tinker policy served by svc (whose vocabulary it sets to the model's),
// the rewriter and checker frozen embedded policies and the judge an
// upstream at upURL.
func tinkerTrainDir(t *testing.T, ctx context.Context, dir string, svc *tinkertest.Server, upURL, self string, steps int) string {
	t.Helper()
	t.Setenv("AGL_TEST_TINKER_KEY", "tml-stand-in")
	cfgPath := trainDir(t, ctx, dir, "testdata/agents_harness.py", 6, func(string) string {
		return fmt.Sprintf(`data_dir: run
policies:
  writer:
    kind: tinker
    model_dir: model
    agents: [writer]
    tinker: {base_model: stand-in/bigram, base_url: %q, api_key_env: AGL_TEST_TINKER_KEY, lora: {rank: 8}, max_context: 512}
  rewriter: {kind: frozen, model_dir: model, agents: [rewriter]}
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
  steps: %d
  tasks_per_step: 2
  group_size: 4
  lr: 0.01
  drop_uniform_groups: false
  rollout: {timeout_seconds: 120, max_attempts: 2}
`, svc.URL, upURL+"/v1", self, harnessEnv, steps)
	})
	var vocab struct {
		N int `json:"vocab_size"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "model", "config.json"))
	if err != nil || json.Unmarshal(b, &vocab) != nil || vocab.N == 0 {
		t.Fatalf("model config: %v %s", err, b)
	}
	svc.SetVocab(vocab.N)
	return cfgPath
}

// TestTrainTinkerResumeAfterKill kills `agl train` with SIGKILL after its
// first checkpoint; --resume restores the tinker policy with load_weights
// from the checkpoint's tinker:// path and the run finishes its steps.
func TestTrainTinkerResumeAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds agl and trains through a stand-in service")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	up := vllmUpstream(t)
	svc := tinkertest.New("tml-stand-in", 0, 11)
	defer svc.Close()
	const steps = 3
	cfgPath := tinkerTrainDir(t, ctx, dir, svc, up.URL, self, steps)
	cmd := exec.Command(bin, "train", cfgPath)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ckpt := trainer.CheckpointDir(filepath.Join(dir, "run"))
	deadline := time.After(3 * time.Minute)
	saved := filepath.Join(ckpt, trainer.PolicyDir("writer"), "tinker.json")
	for _, err := os.Stat(saved); err != nil; _, err = os.Stat(saved) {
		select {
		case err := <-exited:
			t.Fatalf("agl train exited before its first checkpoint: %v\n%s", err, out.String())
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("no checkpoint after 3 minutes\n%s", out.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	killed, err := trainer.LoadState(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	if killed.Step >= steps {
		t.Fatalf("the run finished (step %d) before the kill: the test proves nothing", killed.Step)
	}
	var rout bytes.Buffer
	if err := run(ctx, []string{"train", "--resume", cfgPath}, &rout, &rout); err != nil {
		t.Fatalf("resume: %v\n%s", err, rout.String())
	}
	state, err := trainer.LoadState(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	if state.Step != steps || state.Versions["writer"] != steps+1 {
		t.Fatalf("after resume: %+v, want step %d and writer version %d (killed at step %d)", state, steps, steps+1, killed.Step)
	}
	if n := svc.Count("/api/v1/load_weights"); n != 1 {
		t.Errorf("load_weights %d times", n)
	}
	if bad := svc.MalformedRequests(); len(bad) > 0 {
		t.Fatalf("the stand-in refused requests: %q", bad)
	}
	t.Logf("killed after step %d; resumed to step %d", killed.Step, state.Step)
}

// A tinker policy whose model_dir lacks the tokenizer is refused before
// anything is created on the service, naming the file.
func TestTrainTinkerMissingTokenizer(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc := tinkertest.New("tml-stand-in", 0, 11)
	defer svc.Close()
	cfgPath := tinkerTrainDir(t, ctx, dir, svc, "http://127.0.0.1:1", "true", 1)
	// The writer's model_dir holds the chat template but no tokenizer; the
	// frozen policies keep theirs.
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg = bytes.Replace(cfg, []byte("model_dir: model\n    agents: [writer]"), []byte("model_dir: wmodel\n    agents: [writer]"), 1)
	chatCfg, err := os.ReadFile(filepath.Join(dir, "model", "agl_chat.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "wmodel"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "wmodel", "agl_chat.json"), chatCfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = run(ctx, []string{"train", cfgPath}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "policy writer") || !strings.Contains(err.Error(), "wmodel/tokenizer.json") {
		t.Fatalf("error %v, want one naming tokenizer.json", err)
	}
	if len(svc.Models()) != 0 {
		t.Errorf("models created: %v", svc.Models())
	}
}

// A wrong API key stops `agl train` at start-up with one line naming the
// endpoint and the 401; nothing is created on the service and no version
// of the tinker policy is registered.
func TestTrainTinkerWrongKey(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc := tinkertest.New("tml-stand-in", 0, 11)
	defer svc.Close()
	cfgPath := tinkerTrainDir(t, ctx, dir, svc, "http://127.0.0.1:1", "true", 1)
	t.Setenv("AGL_TEST_TINKER_KEY", "tml-wrong-key")
	var out bytes.Buffer
	err := run(ctx, []string{"train", cfgPath}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "policy writer") || !strings.Contains(err.Error(), "/api/v1/create_session: HTTP 401") ||
		strings.Contains(err.Error(), "\n") || strings.Contains(err.Error()+out.String(), "tml-wrong-key") {
		t.Fatalf("error %v (output %q): want one line naming create_session and 401, without the key", err, out.String())
	}
	if len(svc.Models()) != 0 {
		t.Errorf("models created: %v", svc.Models())
	}
	st, err := app.OpenStore(ctx, config.Config{DataDir: filepath.Join(dir, "run")}, newLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if ms, err := st.ListModels(ctx, "writer"); err != nil || len(ms) != 0 {
		t.Errorf("writer versions registered: %v %v", ms, err)
	}
}

// TestSFTTinker runs `agl sft --tinker` against the stand-in: every step
// is cross_entropy forward_backward calls and one optim_step, the first
// step's loss is the batch mean of the untrained model's per-token loss
// (≈ ln V: the weights carry the embedded SFT's 1/N), the loss falls, and
// the sampler and state paths are printed and the state kept in
// out/tinker.json.
func TestSFTTinker(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"model_type":"qwen3","hidden_size":32,"intermediate_size":64,"num_hidden_layers":1,
		"num_attention_heads":2,"num_key_value_heads":1,"head_dim":16,"rms_norm_eps":1e-6,"rope_theta":10000,
		"max_position_embeddings":128,"tie_word_embeddings":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	modelDir := filepath.Join(dir, "init")
	var out bytes.Buffer
	if err := run(ctx, []string{"model", "init", "--config", cfg, "--out", modelDir}, &out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var vocab struct {
		N int `json:"vocab_size"`
	}
	b, err := os.ReadFile(filepath.Join(modelDir, "config.json"))
	if err != nil || json.Unmarshal(b, &vocab) != nil || vocab.N == 0 {
		t.Fatalf("model config: %v %s", err, b)
	}
	svc := tinkertest.New("tml-stand-in", vocab.N, 5)
	defer svc.Close()
	t.Setenv("AGL_TEST_TINKER_KEY", "tml-stand-in")
	tk := filepath.Join(dir, "tinker.yaml")
	if err := os.WriteFile(tk, []byte(fmt.Sprintf("base_model: stand-in/bigram\nbase_url: %s\napi_key_env: AGL_TEST_TINKER_KEY\nlora: {rank: 4}\n", svc.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	var data strings.Builder
	for i := range 48 {
		s := strings.Repeat(string(rune('a'+i%6)), 3)
		fmt.Fprintf(&data, `{"messages":[{"role":"user","content":"say %s"},{"role":"assistant","content":"%s"}]}`+"\n", s, s)
	}
	dataPath := filepath.Join(dir, "data.jsonl")
	if err := os.WriteFile(dataPath, []byte(data.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(dir, "out")
	out.Reset()
	const steps = 30
	err = run(ctx, []string{"sft", "--tinker", tk, "--model", modelDir, "--data", dataPath, "--out", outDir,
		"--steps", fmt.Sprint(steps), "--batch-size", "8", "--lr", "0.1", "--log-every", "1"}, &out, &out)
	if err != nil {
		t.Fatalf("sft: %v\n%s", err, out.String())
	}
	t.Logf("sft output:\n%s", out.String())
	if bad := svc.MalformedRequests(); len(bad) > 0 {
		t.Fatalf("the stand-in refused requests: %q", bad)
	}
	for path, want := range map[string]int{"/api/v1/create_model": 1, "/api/v1/optim_step": steps, "/api/v1/save_weights": 1} {
		if got := svc.Count(path); got != want {
			t.Errorf("%s: %d calls, want %d", path, got, want)
		}
	}
	if n := svc.Count("/api/v1/forward_backward"); n < steps {
		t.Errorf("forward_backward: %d calls for %d steps", n, steps)
	}
	losses := regexp.MustCompile(`\] \d+/\d+ epoch \d+ loss ([0-9.]+)`).FindAllStringSubmatch(out.String(), -1)
	if len(losses) != steps {
		t.Fatalf("%d progress lines, want %d", len(losses), steps)
	}
	first, _ := strconv.ParseFloat(losses[0][1], 64)
	last, _ := strconv.ParseFloat(losses[steps-1][1], 64)
	if lnV := math.Log(float64(vocab.N)); math.Abs(first-lnV) > 0.1*lnV || last > 0.7*first {
		t.Errorf("loss %.4f → %.4f: want ≈ ln %d = %.4f at first, then below 70%% of it", first, last, vocab.N, lnV)
	}
	ck, err := os.ReadFile(filepath.Join(outDir, "tinker.json"))
	var state struct {
		StatePath string `json:"state_path"`
	}
	if err != nil || json.Unmarshal(ck, &state) != nil || !strings.HasPrefix(state.StatePath, "tinker://") {
		t.Fatalf("out/tinker.json: %v %s", err, ck)
	}
	for _, want := range []string{"sampler weights tinker://", "weights and optimizer state " + state.StatePath} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Flags of the embedded trainer are refused by name.
	err = run(ctx, []string{"sft", "--tinker", tk, "--model", modelDir, "--data", dataPath, "--out", outDir, "--clip", "2"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "--clip: not with --tinker") {
		t.Errorf("--clip with --tinker: %v", err)
	}
}
