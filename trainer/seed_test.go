package trainer

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aglrl/agl/internal/seed"
)

// TestRunSeed: the run's seed comes from the config, else the checkpoint,
// else a random draw; a resumed run given another seed is refused. Each
// planned rollout's metadata carries a seed of its own that depends only
// on the run's seed and the rollout's place (step, task, member).
func TestRunSeed(t *testing.T) {
	dir, st := setup(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	loop := func(cfgSeed, stateSeed uint64) (*Loop, error) {
		cfg := Config{Tasks: filepath.Join(dir, "tasks.jsonl"), Steps: 3, TasksPerStep: 2, GroupSize: 3, Seed: cfgSeed}
		return New(cfg, st, one(&fakePolicy{pub: &fakePublisher{}}), State{Version: 1, Seed: stateSeed}, dir, "agl", quiet, io.Discard)
	}
	for _, tc := range []struct {
		name               string
		cfgSeed, stateSeed uint64
		want               uint64 // 0: random
		err                string
	}{
		{"configured", 5, 0, 5, ""},
		{"from the checkpoint", 0, 9, 9, ""},
		{"both, equal", 9, 9, 9, ""},
		{"random", 0, 0, 0, ""},
		{"resumed with another seed", 5, 9, 0, "seed 5 differs from the checkpoint's seed 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := loop(tc.cfgSeed, tc.stateSeed)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := l.Seed(); got == 0 || tc.want != 0 && got != tc.want {
				t.Errorf("seed %d, want %d (0: any but 0)", got, tc.want)
			}
		})
	}

	a, _ := loop(5, 0)
	b, _ := loop(5, 0)
	c, _ := loop(6, 0)
	seen := map[uint64]string{}
	for s := 1; s <= 3; s++ {
		pa, pb, pc := a.plan(s), b.plan(s), c.plan(s)
		for i := range pa {
			sa := seed.FromMetadata(pa[i].Metadata)
			if sa == 0 || sa != seed.FromMetadata(pb[i].Metadata) || sa == seed.FromMetadata(pc[i].Metadata) {
				t.Errorf("%s: seeds %s / %s / %s, want equal for the same run seed, else different", pa[i].ID, pa[i].Metadata, pb[i].Metadata, pc[i].Metadata)
			}
			if prev, ok := seen[sa]; ok {
				t.Errorf("%s and %s share seed %d", prev, pa[i].ID, sa)
			}
			seen[sa] = pa[i].ID
			if !strings.Contains(string(pa[i].Metadata), `"step":`) {
				t.Errorf("%s: metadata %s lost the step", pa[i].ID, pa[i].Metadata)
			}
		}
	}
}
