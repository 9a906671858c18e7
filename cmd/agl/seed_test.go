package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/app"
	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/store"
)

// TestTrainSeeded runs `agl train` on the letter harness (a real Python
// subprocess, sampling at temperature 1) on the same tiny model: a run of
// two steps; a run with the same trainer.seed stopped after step 1 and
// resumed for step 2 records the same response ids for every call and
// ends with a byte-identical checkpoint (weights, optimizer state, loop
// state); another seed samples differently. (Four short runs: cmd/agl's
// tests are the slow ones.)
func TestTrainSeeded(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	testutil.SkipRace(t, "four runs compared byte for byte: reproducible numerics (TestTrainEndToEnd runs the same stack under the race detector)")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfgPath := letterTrainDir(t, ctx, dir, func(harness string) string {
		return fmt.Sprintf(`data_dir: run
engine: {model_dir: model}
proxy: {train: {temperature: 1.0}}
controller: {command: [python3, %q], concurrency: 4}
trainer: {tasks: tasks.jsonl, steps: 2, tasks_per_step: 2, group_size: 4, lr: 0.01, val_limit: 2, seed: SEED}
`, harness)
	})
	tmpl, _ := os.ReadFile(cfgPath)
	train := func(name, seed string, args ...string) string {
		t.Helper()
		cfg := filepath.Join(dir, name+".yaml")
		os.WriteFile(cfg, bytes.ReplaceAll(tmpl, []byte("SEED"), []byte(seed)), 0o644)
		var out bytes.Buffer
		args = append(append([]string{"train", "--data-dir", filepath.Join(dir, name)}, args...), cfg)
		if err := run(ctx, args, &out, &out); err != nil {
			t.Fatalf("train %s: %v\n%s", name, err, out.String())
		}
		if !strings.Contains(out.String(), "sampling seed "+seed+" ") {
			t.Errorf("train %s: no seed %s in the header:\n%s", name, seed, out.String())
		}
		return filepath.Join(dir, name)
	}
	a := train("a", "7")
	c := train("c", "8", "--steps", "1")
	d := train("d", "7", "--steps", "1")
	step1 := trainCalls(t, ctx, d)
	train("d", "7", "--resume")

	callsA := trainCalls(t, ctx, a)
	if len(callsA) != 2*2*4 || len(step1) != 2*4 {
		t.Fatalf("%d and %d train rollouts with calls, want 16 and 8", len(callsA), len(step1))
	}
	for id, calls := range step1 {
		if callsA[id] != calls {
			t.Errorf("%s: same seed, other calls: %s and %s", id, callsA[id], calls)
		}
	}
	if calls := trainCalls(t, ctx, d); fmt.Sprint(calls) != fmt.Sprint(callsA) {
		t.Errorf("same seed, stopped and resumed: other response ids\n a: %v\n d: %v", callsA, calls)
	}
	if diff := diffDirs(filepath.Join(a, "checkpoint"), filepath.Join(d, "checkpoint")); diff != "" {
		t.Errorf("same seed, stopped and resumed: checkpoint differs: %s", diff)
	}
	other := 0
	for id, calls := range trainCalls(t, ctx, c) {
		if calls != step1[id] {
			other++
		}
	}
	if other < 4 {
		t.Errorf("seed 8: %d of 8 rollouts of step 1 sampled other ids than seed 7's, want most", other)
	}
}

// trainCalls maps each train rollout of the run in dataDir to the response
// ids of its calls, in order; every call must have recorded a sampling
// seed.
func trainCalls(t *testing.T, ctx context.Context, dataDir string) map[string]string {
	t.Helper()
	st, err := app.OpenStore(ctx, config.Config{DataDir: dataDir}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out := map[string]string{}
	rs, _, err := st.ListRollouts(ctx, store.RolloutFilter{Mode: store.ModeTrain, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		evs, err := st.ListEvents(ctx, store.EventFilter{RolloutID: r.ID, Types: []string{store.EventModelRequest}})
		if err != nil {
			t.Fatal(err)
		}
		var calls []string
		for _, ev := range evs {
			var mc api.ModelCall
			if err := json.Unmarshal(ev.Data, &mc); err != nil {
				t.Fatal(err)
			}
			var s struct{ Seed uint64 }
			json.Unmarshal(mc.Sampling, &s)
			if s.Seed == 0 {
				t.Errorf("%s: call sampled without a seed", r.ID)
			}
			calls = append(calls, fmt.Sprint(mc.ResponseIDs))
		}
		if len(calls) > 0 {
			out[r.ID] = strings.Join(calls, ";")
		}
	}
	return out
}

// diffDirs names the first file that differs between two directory trees
// ("" when they hold the same files with the same bytes).
func diffDirs(a, b string) string {
	files := map[string]bool{}
	for _, root := range []string{a, b} {
		filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				rel, _ := filepath.Rel(root, p)
				files[rel] = true
			}
			return nil
		})
	}
	if len(files) == 0 {
		return "no files"
	}
	for f := range files {
		x, errA := os.ReadFile(filepath.Join(a, f))
		y, errB := os.ReadFile(filepath.Join(b, f))
		if errA != nil || errB != nil {
			return fmt.Sprintf("%s: %v / %v", f, errA, errB)
		}
		if !bytes.Equal(x, y) {
			return fmt.Sprintf("%s: %d and %d bytes, not equal", f, len(x), len(y))
		}
	}
	return ""
}

// TestCalcPipelineSeeded runs examples/calc's whole pipeline twice at a
// small scale in two directories: make_data.py, `agl model init
// --bpe-data`, the two SFT stages and two RL steps with validation (the
// real harness.py, sampling at temperature 1, 4 rollouts at a time). The
// two runs give the same vocabulary, warm start, sampled response ids,
// held-out figures and final checkpoint, byte for byte. (At this scale
// the warm start earns no reward, so RL updates nothing: that updates
// train the same weights is TestTrainSeeded's.)
func TestCalcPipelineSeeded(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	testutil.SkipRace(t, "two whole pipelines train for 8+ minutes under the race detector")
	py := testutil.Python(t)
	example, err := filepath.Abs("../../examples/calc")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	pipeline := func(dir string) (metrics []string) {
		t.Helper()
		var out bytes.Buffer
		step := func(args ...string) {
			t.Helper()
			out.Reset()
			if err := run(ctx, args, &out, &out); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, out.String())
			}
		}
		if b, err := exec.CommandContext(ctx, py, filepath.Join(example, "make_data.py"), dir, "--train", "40", "--val", "8",
			"--sft-tool", "200", "--sft-mix", "100").CombinedOutput(); err != nil {
			t.Fatalf("make_data.py: %v\n%s", err, b)
		}
		p := func(name string) string { return filepath.Join(dir, name) }
		step("model", "init", "--preset", "tiny", "--bpe-data", p("sft_tool.jsonl"), "--out", p("init"))
		step("sft", "--model", p("init"), "--data", p("sft_tool.jsonl"), "--out", p("skill"), "--steps", "12", "--batch-size", "8", "--lr", "0.003")
		step("sft", "--model", p("skill"), "--data", p("sft_mix.jsonl"), "--out", p("model"), "--steps", "4", "--batch-size", "8", "--lr", "0.001")
		cfg := fmt.Sprintf(`data_dir: run
engine: {model_dir: model, max_batch: 8}
proxy: {train: {temperature: 1.0}, val: {temperature: 0}}
controller: {command: [%q, %q], concurrency: 4}
trainer: {tasks: train.jsonl, val_tasks: val.jsonl, steps: 2, tasks_per_step: 2, group_size: 4, val_every: 1, lr: 0.0005, seed: 1, keep_best: true,
  rollout: {timeout_seconds: 120, max_attempts: 2}}
`, py, filepath.Join(example, "harness.py"))
		if err := os.WriteFile(p("agl.yaml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		step("train", "--data-dir", p("run"), p("agl.yaml"))
		b, err := os.ReadFile(p("run/metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var m struct {
				Step          int     `json:"step"`
				Mode          string  `json:"mode"`
				Rollouts      int     `json:"rollouts"`
				RewardMean    float64 `json:"reward_mean"`
				SuccessRate   float64 `json:"success_rate"`
				Loss          float64 `json:"loss"`
				TrainedTokens int     `json:"trained_tokens"`
			}
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatal(err)
			}
			metrics = append(metrics, fmt.Sprintf("%s step %d: %d rollouts, reward %v, success %v, trained tokens %d, loss %v",
				m.Mode, m.Step, m.Rollouts, m.RewardMean, m.SuccessRate, m.TrainedTokens, m.Loss))
		}
		return metrics
	}
	a, b := t.TempDir(), t.TempDir()
	ma, mb := pipeline(a), pipeline(b)
	t.Logf("run a:\n%s", strings.Join(ma, "\n"))
	if len(ma) != 5 { // validations before, after step 1 and after step 2; 2 steps
		t.Errorf("%d metrics lines, want 5", len(ma))
	}
	if !slices.Equal(ma, mb) {
		t.Errorf("same seed, other figures:\n a: %q\n b: %q", ma, mb)
	}
	// The harness's calls sampled the same ids (at temperature 1).
	ca, cb := trainCalls(t, ctx, filepath.Join(a, "run")), trainCalls(t, ctx, filepath.Join(b, "run"))
	if len(ca) != 2*2*4 || fmt.Sprint(ca) != fmt.Sprint(cb) {
		t.Errorf("same seed: %d and %d train rollouts with calls (want 16), response ids equal: %v", len(ca), len(cb), fmt.Sprint(ca) == fmt.Sprint(cb))
	}
	for _, d := range []string{"init", "model", "run/checkpoint", "run/best"} {
		if diff := diffDirs(filepath.Join(a, d), filepath.Join(b, d)); diff != "" {
			t.Errorf("%s differs: %s", d, diff)
		}
	}
}
