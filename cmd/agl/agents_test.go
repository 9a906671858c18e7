package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
