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
