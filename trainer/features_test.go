package trainer

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
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
		// 2 tokens of L = 4 → 0.2·0.5 = 0.1 off each rollout
		{"length penalty", Config{LengthPenalty: 0.2, LengthPenaltyTokens: 4}, 2, 0, 4, 0.1},
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
			pol := &fakePolicy{}
			cctx, stopCtl := context.WithCancel(ctx)
			wait := (&fakeController{name: "c", st: st, pub: pub, reg: &registry{}}).start(cctx, t)
			defer func() { stopCtl(); wait() }()
			var out bytes.Buffer
			l, err := New(cfg, st, pol, pub, State{Version: 1}, dir, "agl", slog.New(slog.NewTextHandler(io.Discard, nil)), &out)
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
