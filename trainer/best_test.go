package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// versionPolicy is a fakePolicy whose checkpoint records the version it
// serves, so that a test can tell which weights a directory holds.
type versionPolicy struct{ *fakePolicy }

func (p versionPolicy) SaveCheckpoint(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "model.safetensors"), fmt.Appendf(nil, "v%d", p.pub.version.Load()), 0o644)
}

// TestKeepBest: with keep_best, the weights of the best validation (by
// success rate, the earlier on a tie, the one before the first step
// included) are kept in BestDir and named in the summary and its
// state.json; without it there is no such directory.
func TestKeepBest(t *testing.T) {
	// Successes of the 2 val tasks by served version (v1 before step 1).
	tests := []struct {
		name     string
		keep     bool
		succ     map[int64]int
		wantStep int
		wantV    int64
	}{
		{"rises then degrades", true, map[int64]int{1: 0, 2: 1, 3: 2, 4: 2, 5: 0}, 2, 3},
		{"never beats the start", true, map[int64]int{1: 1, 2: 0, 3: 1, 4: 0, 5: 1}, 0, 1},
		{"rises to the end", true, map[int64]int{1: 0, 2: 0, 3: 1, 4: 1, 5: 2}, 4, 5},
		{"off", false, map[int64]int{1: 0, 2: 2, 3: 0, 4: 0, 5: 0}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, st := setup(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := Config{Tasks: filepath.Join(dir, "tasks.jsonl"), Steps: 4, TasksPerStep: 2, GroupSize: 2, ValEvery: 1, KeepBest: tc.keep}
			pub := &fakePublisher{}
			pub.version.Store(1)
			reward := func(id string) float64 {
				var v int64
				var k int
				if n, _ := fmt.Sscanf(id, "agl-val-v%d-t%d", &v, &k); n == 2 {
					if k < tc.succ[v] {
						return 1
					}
					return 0
				}
				return float64(id[len(id)-1] % 2) // train: mixed rewards in each group
			}
			cctx, stopCtl := context.WithCancel(ctx)
			wait := (&fakeController{name: "c", st: st, pub: pub, reg: &registry{}, reward: reward}).start(cctx, t)
			defer func() { stopCtl(); wait() }()
			l, err := New(cfg, st, one(versionPolicy{&fakePolicy{pub: pub}}), State{Version: 1}, dir, "agl", slog.New(slog.NewTextHandler(io.Discard, nil)), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			sum, err := l.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.keep {
				if sum.Best != nil {
					t.Errorf("keep_best off: summary best %+v", *sum.Best)
				}
				if _, err := os.Stat(BestDir(dir)); !os.IsNotExist(err) {
					t.Errorf("keep_best off: %s exists (%v)", BestDir(dir), err)
				}
				return
			}
			if sum.Best == nil || sum.Best.Step != tc.wantStep || sum.Best.Version != tc.wantV {
				t.Fatalf("best %+v, want step %d v%d", sum.Best, tc.wantStep, tc.wantV)
			}
			if want := float64(tc.succ[tc.wantV]) / 2; sum.Best.SuccessRate != want {
				t.Errorf("best success %v, want %v", sum.Best.SuccessRate, want)
			}
			w, err := os.ReadFile(filepath.Join(BestDir(dir), "model.safetensors"))
			if err != nil || string(w) != fmt.Sprintf("v%d", tc.wantV) {
				t.Errorf("best weights %q (%v), want v%d's", w, err, tc.wantV)
			}
			b, err := os.ReadFile(filepath.Join(BestDir(dir), "state.json"))
			if err != nil {
				t.Fatal(err)
			}
			var s State
			if err := json.Unmarshal(b, &s); err != nil || s.Best == nil || *s.Best != *sum.Best {
				t.Errorf("best state.json %s, want best %+v", b, *sum.Best)
			}
		})
	}
}
