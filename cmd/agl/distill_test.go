package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aglrl/agl/app"
	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/model"
	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/tokenizer"
	"github.com/aglrl/agl/trainer"
)

// distillDir makes a letter-task training dir (trainDir: a random tiny
// model in model/, the teacher) and the student in student/: the teacher's
// weights fine-tuned (agl sft) to answer "letter X" with "X X X", so that
// it is sure of tokens the near-uniform teacher is not: a student whose
// reverse KL to its teacher is large and can fall fast, from its own
// samples (learning to match a peaked teacher from a near-uniform student
// needs far more samples than a test can take).
func distillDir(t *testing.T, ctx context.Context, dir string, config func(harness string) string) string {
	t.Helper()
	cfg := letterTrainDir(t, ctx, dir, config)
	var sft strings.Builder
	for i := 0; i < 10; i++ {
		c := string(rune('a' + i))
		line, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": "letter " + c}, {"role": "assistant", "content": c + " " + c + " " + c}}})
		sft.Write(append(line, '\n'))
	}
	data := filepath.Join(dir, "sft.jsonl")
	if err := os.WriteFile(data, []byte(sft.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"sft", "--model", filepath.Join(dir, "model"), "--data", data, "--out", filepath.Join(dir, "student"),
		"--steps", "40", "--batch-size", "10", "--lr", "0.01"}, &out, &out); err != nil {
		t.Fatalf("sft: %v\n%s", err, out.String())
	}
	return cfg
}

func distillConfig(harness, distill string) string {
	return fmt.Sprintf(`data_dir: run
policies:
  student: {kind: trained, model_dir: student, agents: [""]}
  teacher: {kind: frozen, model_dir: model, agents: [teacher]}
proxy:
  train: {temperature: 1.0}
controller:
  command: [python3, %q]
  concurrency: 4
trainer:
  tasks: tasks.jsonl
  val_fraction: 0.2
  steps: 6
  tasks_per_step: 4
  group_size: 4
  lr: 0.01
  seed: 3
  rollout: {timeout_seconds: 60, max_attempts: 2}
  distill: %s
`, harness, distill)
}

// TestTrainDistill runs `agl train` with a trained tiny student (the
// teacher fine-tuned) and a frozen teacher, distilling alone (mode
// replace): the first step's distill_kl in metrics.jsonl is the mean over
// the step's trained tokens of the recorded sampling log-prob minus the
// log-prob a direct forward of the teacher's model gives, so the teacher's
// log-probs are the ones used; and the reverse KL falls over the steps.
func TestTrainDistill(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	testutil.SkipRace(t, "a student trained until its reverse KL falls (model numerics)")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cfgPath := distillDir(t, ctx, dir, func(harness string) string {
		return distillConfig(harness, "{teacher: teacher, coef: 1, mode: replace}")
	})
	var out bytes.Buffer
	if err := run(ctx, []string{"train", cfgPath}, &out, &out); err != nil {
		t.Fatalf("train: %v\n%s", err, out.String())
	}
	t.Logf("train output:\n%s", out.String())
	if !strings.Contains(out.String(), "distill-kl") {
		t.Errorf("no distill-kl on the progress lines")
	}
	run := filepath.Join(dir, "run")
	b, err := os.ReadFile(filepath.Join(run, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var kls []float64
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m trainer.StepMetrics
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		if m.Mode != string(store.ModeTrain) {
			continue
		}
		if m.DistillKL == nil || m.Policies["student"].DistillKL == nil {
			t.Fatalf("step %d: no distill_kl in %s", m.Step, line)
		}
		kls = append(kls, *m.DistillKL)
	}
	t.Logf("distill_kl by step: %.4f", kls)
	if len(kls) != 6 {
		t.Fatalf("%d train steps in metrics.jsonl, want 6", len(kls))
	}
	if first, last := (kls[0]+kls[1])/2, (kls[4]+kls[5])/2; !(last < 0.7*first) {
		t.Errorf("reverse KL did not fall: first two steps %.4f, last two %.4f", first, last)
	}

	// Recompute step 1's reverse KL from the stored calls and the teacher's
	// own forward pass.
	want, n := stepReverseKL(t, ctx, run, 1, modelLogProbs(t, filepath.Join(dir, "model")))
	t.Logf("step 1: %d trained tokens, reverse KL recomputed %.6f, reported %.6f", n, want, kls[0])
	if math.Abs(want-kls[0]) > 1e-3*math.Max(1, math.Abs(want)) {
		t.Errorf("step 1's distill_kl %.6f, want %.6f (recorded log-probs minus the teacher's forward pass)", kls[0], want)
	}
}

// stepReverseKL is the mean over the trained tokens of train step s of
// the data dir run of the recorded log-prob minus the teacher's log-prob
// of the token (teacher gives lp[i] = log p(ids[i] | ids[:i])), and their
// number.
func stepReverseKL(t *testing.T, ctx context.Context, run string, s int, teacher func(ids []int32) []float32) (float64, int) {
	t.Helper()
	st, err := app.OpenStore(ctx, config.Config{DataDir: run}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var done []store.Rollout
	events := map[string][]store.Event{}
	rs, _, err := st.ListRollouts(ctx, store.RolloutFilter{Mode: store.ModeTrain, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if !strings.HasPrefix(r.ID, fmt.Sprintf("agl-s%d-", s)) {
			continue
		}
		full, err := st.GetRollout(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		done = append(done, full)
		if events[r.ID], err = st.ListEvents(ctx, store.EventFilter{RolloutID: r.ID}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := samples.FromRollouts(done, events, samples.Config{})
	if err != nil || len(res.Samples) == 0 {
		t.Fatalf("step %d's samples: %d, %v", s, len(res.Samples), err)
	}
	var sum float64
	n := 0
	for _, s := range res.Samples {
		lp := teacher(s.IDs)
		for i, mk := range s.LossMask {
			if mk != 0 {
				sum += float64(s.Logprobs[i]) - float64(lp[i])
				n++
			}
		}
	}
	return sum / float64(n), n
}

// modelLogProbs is a teacher for stepReverseKL: a forward pass of the
// model in dir.
func modelLogProbs(t *testing.T, dir string) func(ids []int32) []float32 {
	t.Helper()
	w, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(w.Config, "")
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.Upload(w)
	if err != nil {
		t.Fatal(err)
	}
	return func(ids []int32) []float32 {
		lp, _, err := m.LogProbs(context.Background(), d, [][]int32{ids})
		if err != nil {
			t.Fatal(err)
		}
		return lp[0]
	}
}

// upstreamTeacher is the log-prob the upstream teacher of
// TestTrainDistillUpstream gives token ids[i] after ids[:i]: a fixed
// function of the token and its position, in (-3, -0.25].
func upstreamTeacher(ids []int32) []float32 {
	lp := make([]float32, len(ids))
	for i := 1; i < len(ids); i++ {
		lp[i] = -float32(1+(int(ids[i])*7+i)%11) / 4
	}
	return lp
}

// TestTrainDistillUpstream distils from an upstream teacher: a loopback
// server answering /v1/completions in vLLM's prompt_logprobs shape (the
// log-probs of upstreamTeacher). Step 1's distill_kl equals the one
// recomputed from the stored calls and those log-probs, so the upstream's
// answers are the teacher's log-probs the trainer used, each at its token.
// The student is the random tiny model (that the reverse KL falls is
// TestTrainDistill's).
func TestTrainDistillUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var mu sync.Mutex
	calls := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Prompt         []int32 `json:"prompt"`
			MaxTokens      int     `json:"max_tokens"`
			PromptLogprobs *int    `json:"prompt_logprobs"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/v1/completions" || req.PromptLogprobs == nil || req.MaxTokens != 1 {
			http.Error(w, `{"error":{"message":"want a prompt_logprobs completion"}}`, http.StatusBadRequest)
			return
		}
		mu.Lock()
		calls++
		mu.Unlock()
		lp := upstreamTeacher(req.Prompt)
		var b strings.Builder
		fmt.Fprintf(&b, `{"id":"cmpl-1","object":"text_completion","created":1,"model":"big","choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":null,"prompt_logprobs":[null`)
		for i, id := range req.Prompt[1:] {
			fmt.Fprintf(&b, `,{"%d":{"logprob":%v,"rank":1,"decoded_token":"t"}}`, id, lp[i+1])
		}
		fmt.Fprintf(&b, `],"prompt_token_ids":null}],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":1}}`, len(req.Prompt), len(req.Prompt)+1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(b.String()))
	}))
	defer up.Close()
	cfgPath := letterTrainDir(t, ctx, dir, func(harness string) string {
		return strings.NewReplacer(
			"  student: {kind: trained, model_dir: student, agents: [\"\"]}\n",
			"  student: {kind: trained, model_dir: model, agents: [\"\"]}\n",
			"  teacher: {kind: frozen, model_dir: model, agents: [teacher]}\n",
			fmt.Sprintf("  big: {kind: upstream, agents: [big], upstream: {models: [{name: big, endpoints: [%q], tokenizer_dir: model, max_context: 2048}]}}\n", up.URL+"/v1"),
			"steps: 6", "steps: 1").Replace(distillConfig(harness, "{teacher: big, coef: 1}"))
	})
	var out bytes.Buffer
	if err := run(ctx, []string{"train", cfgPath}, &out, &out); err != nil {
		t.Fatalf("train: %v\n%s", err, out.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "run", "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var first trainer.StepMetrics
	if err := json.Unmarshal(bytes.SplitN(b, []byte("\n"), 3)[1], &first); err != nil || first.Step != 1 || first.DistillKL == nil {
		t.Fatalf("step 1's metrics %s: %v", bytes.SplitN(b, []byte("\n"), 3)[1], err)
	}
	want, n := stepReverseKL(t, ctx, filepath.Join(dir, "run"), 1, upstreamTeacher)
	t.Logf("step 1: %d trained tokens scored in %d upstream calls; reverse KL recomputed %.6f, reported %.6f", n, calls, want, *first.DistillKL)
	if math.Abs(want-*first.DistillKL) > 1e-3*math.Max(1, math.Abs(want)) {
		t.Errorf("step 1's distill_kl %.6f, want %.6f", *first.DistillKL, want)
	}
}

// TestTrainDistillUpstreamNoPromptLogprobs: an upstream teacher that
// answers without prompt log-probs fails the first step, naming the
// teacher and its endpoint, before the student trains (no version 2, its
// weights file unchanged).
func TestTrainDistillUpstreamNoPromptLogprobs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts on a model")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// A completion without prompt_logprobs (a server that ignores the field).
		w.Write([]byte(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"big","choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`))
	}))
	defer up.Close()
	var cfgPath string
	cfgPath = letterTrainDir(t, ctx, dir, func(harness string) string {
		return fmt.Sprintf(`data_dir: run
policies:
  student: {kind: trained, model_dir: model, agents: [""]}
  big: {kind: upstream, agents: [big], upstream: {models: [{name: big, endpoints: [%q], tokenizer_dir: model, max_context: 512}]}}
controller:
  command: [python3, %q]
  concurrency: 4
trainer:
  tasks: tasks.jsonl
  steps: 1
  tasks_per_step: 1
  group_size: 2
  rollout: {timeout_seconds: 60, max_attempts: 2}
  distill: {teacher: big, coef: 1}
`, up.URL+"/v1", harness)
	})
	before := fileHash(t, filepath.Join(dir, "model", "model.safetensors"))
	var out bytes.Buffer
	err := run(ctx, []string{"train", cfgPath}, &out, &out)
	if err == nil {
		t.Fatalf("train succeeded with a teacher that serves no prompt log-probs:\n%s", out.String())
	}
	for _, want := range []string{"step 1", "policy student", "teacher big", "upstream big", up.URL + "/v1", "no prompt_logprobs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if _, statErr := os.Stat(filepath.Join(dir, "run", "checkpoint")); statErr == nil {
		t.Errorf("a checkpoint was written after the failed step")
	}
	if fileHash(t, filepath.Join(dir, "model", "model.safetensors")) != before {
		t.Errorf("the student's model_dir changed")
	}
}

// TestTrainDistillRefused: bad trainer.distill settings are refused before
// any rollout, each with an error naming what was wrong.
func TestTrainDistillRefused(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	for _, m := range []string{"model", "same"} {
		if err := run(ctx, []string{"model", "init", "--preset", "tiny", "--out", filepath.Join(dir, m)}, &out, &out); err != nil {
			t.Fatalf("model init: %v\n%s", err, out.String())
		}
	}
	// A teacher whose vocabulary has one more special token.
	other, err := tokenizer.NewByte(append(append([]string(nil), tokenizer.ChatSpecialTokens...), "<extra>")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Save(filepath.Join(dir, "other.json")); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"model", "init", "--preset", "tiny", "--tokenizer", filepath.Join(dir, "other.json"), "--out", filepath.Join(dir, "other")}, &out, &out); err != nil {
		t.Fatalf("model init: %v\n%s", err, out.String())
	}
	if err := os.WriteFile(filepath.Join(dir, "tasks.jsonl"), []byte(`{"letter":"a"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const policies = `policies:
  student: {kind: trained, model_dir: model, agents: [""]}
  helper: {kind: trained, model_dir: model, agents: [helper]}
  same: {kind: frozen, model_dir: same, agents: [same]}
  other: {kind: frozen, model_dir: other, agents: [other]}
  remote: {kind: upstream, agents: [remote], upstream: {models: [{name: r, endpoints: ["http://127.0.0.1:9/v1"]}]}}
`
	cases := []struct{ name, policies, distill, want string }{
		{"not a policy", policies, "{teacher: nobody, coef: 1}", `trainer.distill.teacher: "nobody" is not a policy (policies: helper, other, remote, same, student)`},
		{"itself", policies, "{teacher: {student: student, helper: same}, coef: 1}", "policy student is its own teacher"},
		{"trained teacher", policies, "{teacher: {student: helper}, coef: 1}", "policy helper is of kind trained: a teacher is of kind frozen or upstream"},
		{"student not trained", policies, "{teacher: {same: student}, coef: 1}", "trainer.distill.teacher: same is not a trained policy"},
		{"tokenizer", policies, "{teacher: other, coef: 1}", "the tokenizer of teacher other (" + filepath.Join(dir, "other") + ") differs from the tokenizer of student helper (" + filepath.Join(dir, "model") + ")"},
		{"upstream without tokenizer", policies, "{teacher: remote, coef: 1}", "teacher remote: an upstream teacher needs upstream.models[0].tokenizer_dir"},
		{"coef 0", policies, "{teacher: same, coef: 0}", "trainer.distill.coef 0: want a finite value > 0"},
		{"coef negative", policies, "{teacher: same, coef: -0.5}", "trainer.distill.coef -0.5: want a finite value > 0"},
		{"mode", policies, "{teacher: same, coef: 1, mode: both}", `trainer.distill.mode "both": want replace or add`},
		{"no teacher", policies, "{coef: 1}", "trainer.distill.teacher: no teacher policy named"},
		{"no policies", "engine: {model_dir: model}\n", "{teacher: same, coef: 1}", "trainer.distill: the teacher is a policy of the policies: section, and the config has none"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := filepath.Join(dir, "agl.yaml")
			body := fmt.Sprintf("data_dir: run-%s\n%scontroller: {command: [\"false\"]}\ntrainer: {tasks: tasks.jsonl, distill: %s}\n",
				strings.ReplaceAll(c.name, " ", "-"), c.policies, c.distill)
			if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err := run(ctx, []string{"train", cfg}, &out, &out)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v\nwant one containing %q", err, c.want)
			}
			if _, statErr := os.Stat(filepath.Join(dir, "run-"+strings.ReplaceAll(c.name, " ", "-"), "agl.db")); statErr == nil {
				t.Errorf("a store was created before the refusal")
			}
		})
	}
}
