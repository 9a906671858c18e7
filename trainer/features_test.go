package trainer

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLoopGroupFeatures runs the loop against the fake harness (reward 1
// for even slots, 0 for odd ones; 2 response tokens per rollout):
// drop_uniform_groups drops the groups whose rewards are all equal
// (singleton groups here) and says so in the metrics and the progress
// line; off, they train with advantage 0; the length penalty is taken off
// every rollout's trained reward and reported.
func TestLoopGroupFeatures(t *testing.T) {
	no := false
	tests := []struct {
		name            string
		cfg             Config
		group           int
		wantDropped     int // per step, of 2 groups
		wantTrainedRows int // per step
		wantPenalty     float64
	}{
		{"uniform groups dropped", Config{}, 1, 2, 0, 0},
		{"uniform groups kept", Config{DropUniformGroups: &no}, 1, 0, 2, 0},
		{"mixed groups train", Config{}, 2, 0, 4, 0},
		// 2 tokens of L = 4 → 0.2·0.5 = 0.1 off each successful rollout
		// (half of them): 0.05 per rollout on average
		{"length penalty", Config{LengthPenalty: 0.2, LengthPenaltyTokens: 4}, 2, 0, 4, 0.05},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, st := setup(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := tc.cfg
			cfg.Tasks, cfg.Steps, cfg.TasksPerStep, cfg.GroupSize = filepath.Join(dir, "tasks.jsonl"), 2, 2, tc.group
			pub := &fakePublisher{}
			pub.version.Store(1)
			pol := &fakePolicy{pub: pub}
			cctx, stopCtl := context.WithCancel(ctx)
			wait := (&fakeController{name: "c", st: st, pub: pub, reg: &registry{}}).start(cctx, t)
			defer func() { stopCtl(); wait() }()
			var out bytes.Buffer
			l, err := New(cfg, st, one(pol), State{Version: 1}, dir, "agl", slog.New(slog.NewTextHandler(io.Discard, nil)), &out)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Run(ctx); err != nil {
				t.Fatal(err)
			}
			for _, m := range readMetrics(t, dir) {
				if m.Groups != 2 || m.DroppedGroups != tc.wantDropped || !near(m.LengthPenalty, tc.wantPenalty) {
					t.Errorf("step %d: groups %d dropped %d penalty %v", m.Step, m.Groups, m.DroppedGroups, m.LengthPenalty)
				}
			}
			rows := 0
			for _, u := range pol.updates {
				rows += len(u)
			}
			if rows != 2*tc.wantTrainedRows {
				t.Errorf("%d rows trained over 2 steps, want %d", rows, 2*tc.wantTrainedRows)
			}
			if want := "dropped " + string(rune('0'+tc.wantDropped)) + "/2 groups"; !strings.Contains(out.String(), want) {
				t.Errorf("progress line lacks %q:\n%s", want, out.String())
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestFilterTasks: with filter_attempts 3 every training task runs 3
// times first; tasks 0–2 always succeed, 3–4 never do, 5–7 succeed on
// their first attempt only: the loop trains on tasks 5–7 alone, writes
// them to filtered_tasks.jsonl and a resumed run reads them back. When no
// task is of intermediate difficulty the run stops with a clear error.
func TestFilterTasks(t *testing.T) {
	taskOf := func(id string) int { // agl-filter-t{k}-r{j} or agl-s{s}-t{k}-r{j}
		i := strings.Index(id, "-t")
		k := 0
		for _, c := range id[i+2:] {
			if c < '0' || c > '9' {
				break
			}
			k = 10*k + int(c-'0')
		}
		return k
	}
	for _, tc := range []struct {
		name   string
		reward func(id string) float64
		err    string
	}{
		{"mixed", func(id string) float64 {
			if !strings.Contains(id, "-filter-") {
				return float64(1 - int(id[len(id)-1]-'0')%2)
			}
			switch k := taskOf(id); {
			case k <= 2:
				return 1
			case k <= 4:
				return 0
			default:
				return float64(1 - min(1, int(id[len(id)-1]-'0')))
			}
		}, ""},
		{"all solved", func(string) float64 { return 1 }, "no task has 0 < success < 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, st := setup(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := Config{Tasks: filepath.Join(dir, "tasks.jsonl"), Steps: 2, TasksPerStep: 2, GroupSize: 2, FilterAttempts: 3}
			pub := &fakePublisher{}
			pub.version.Store(1)
			var mu sync.Mutex
			trainedTasks := map[string]bool{}
			cctx, stopCtl := context.WithCancel(ctx)
			fc := &fakeController{name: "c", st: st, pub: pub, reg: &registry{}, reward: tc.reward}
			wait := fc.start(cctx, t)
			defer func() { stopCtl(); wait() }()
			l, err := New(cfg, st, one(&fakePolicy{pub: pub}), State{Version: 1}, dir, "agl", slog.New(slog.NewTextHandler(io.Discard, nil)), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			sum, err := l.Run(ctx)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Run: %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f := sum.Filter; f.Tasks != 8 || f.Kept != 3 || f.Solved != 3 || f.Unsolved != 2 || f.Rollouts != 24 {
				t.Errorf("filter stats %+v", f)
			}
			for s := 1; s <= 2; s++ {
				for _, r := range l.plan(s) {
					ro, err := st.GetRollout(ctx, r.ID)
					if err != nil {
						t.Fatal(err)
					}
					mu.Lock()
					trainedTasks[string(ro.Task)] = true
					mu.Unlock()
				}
			}
			for task := range trainedTasks {
				if task != `{"n":5}` && task != `{"n":6}` && task != `{"n":7}` {
					t.Errorf("trained on %s, which the filter dropped", task)
				}
			}
			kept, err := ReadTasks(filepath.Join(dir, FilteredTasksFile))
			if err != nil || len(kept) != 3 || string(kept[0]) != `{"n":5}` {
				t.Fatalf("%s: %d tasks %v", FilteredTasksFile, len(kept), err)
			}
			// A resumed run takes the kept tasks from the file.
			l2, err := New(cfg, st, one(&fakePolicy{pub: pub}), State{Step: 1, Version: 2}, dir, "agl", slog.New(slog.NewTextHandler(io.Discard, nil)), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l2.filterTasks(ctx); err != nil || len(l2.train) != 3 {
				t.Errorf("resumed: %d train tasks, %v", len(l2.train), err)
			}
		})
	}
}
