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
	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/store"
)

// TestTrainSeeded runs `agl train` on the letter harness (a real Python
// subprocess, sampling at temperature 1) several times on the same tiny
// model: with the same trainer.seed two runs record the same response ids
// for every call and end with byte-identical checkpoints (weights,
// optimizer state, loop state); another seed samples differently; and a
// run stopped after step 1 and resumed for step 2 equals the run that
// never stopped.
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
	b := train("b", "7")
	c := train("c", "8")
	train("d", "7", "--steps", "1")
	d := train("d", "7", "--resume")

	callsA := trainCalls(t, ctx, a)
	if len(callsA) != 2*2*4 {
		t.Fatalf("run a: %d train rollouts with calls, want 16", len(callsA))
	}
	for _, tc := range []struct {
		name, dir string
		same      bool
	}{{"same seed", b, true}, {"other seed", c, false}, {"stopped and resumed", d, true}} {
		calls := trainCalls(t, ctx, tc.dir)
		if same := fmt.Sprint(calls) == fmt.Sprint(callsA); same != tc.same {
			t.Errorf("%s: response ids equal to run a's: %v, want %v\n a: %v\n %s: %v", tc.name, same, tc.same, callsA, filepath.Base(tc.dir), calls)
		}
		if !tc.same {
			continue
		}
		if diff := diffDirs(filepath.Join(a, "checkpoint"), filepath.Join(tc.dir, "checkpoint")); diff != "" {
			t.Errorf("%s: checkpoint differs from run a's: %s", tc.name, diff)
		}
	}
}

// trainCalls maps each train rollout of the run in dataDir to the response
// ids of its calls, in order, and each call's recorded sampling seed.
func trainCalls(t *testing.T, ctx context.Context, dataDir string) map[string]string {
	t.Helper()
	st, err := openStore(ctx, config.Config{DataDir: dataDir})
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
			calls = append(calls, fmt.Sprint(mc.ResponseIDs, s.Seed))
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
