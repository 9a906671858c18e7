package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aglrl/agl/store"
)

// FilteredTasksFile is where the difficulty filter writes the tasks it
// kept, in the data dir; a resumed run reads it instead of filtering again.
const FilteredTasksFile = "filtered_tasks.jsonl"

// FilterStats is what the difficulty filter did.
type FilterStats struct {
	Tasks, Kept       int
	Solved, Unsolved  int // dropped: every attempt succeeded / none did
	Rollouts          int
	Elapsed           float64
	SuccessBefore     float64 // success rate of all the filter's rollouts
	SuccessOfKeptMean float64
}

// filterTasks is the difficulty filter of a first pass (trainer
// filter_attempts N > 0): before training, every training task runs N
// times at the train sampling settings (mode train, rollout ids
// {run}-filter-t{k}-r{j}, not trained on), and only the tasks with
// 0 < successes < N stay in the training set — a task every attempt
// solves or none does gives a group of equal rewards, which trains
// nothing. The kept tasks are written to FilteredTasksFile; a resumed run
// reads them back. No task kept is an error (nothing could train).
func (l *Loop) filterTasks(ctx context.Context) (FilterStats, error) {
	n := l.cfg.FilterAttempts
	path := filepath.Join(l.dataDir, FilteredTasksFile)
	if l.state.Step > 0 {
		if kept, err := ReadTasks(path); err == nil && len(kept) > 0 {
			l.train = kept
			return FilterStats{Tasks: len(kept), Kept: len(kept)}, nil
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return FilterStats{}, err
		}
	}
	var rs []store.NewRollout
	for k, task := range l.train {
		group := fmt.Sprintf("%s-filter-t%d", store.IDSafe(l.name), k)
		for j := 0; j < n; j++ {
			rs = append(rs, store.NewRollout{ID: fmt.Sprintf("%s-r%d", group, j), GroupID: group, Task: task,
				Mode: store.ModeTrain, Config: l.cfg.Rollout, Metadata: l.rolloutMetadata(-1, seedFilter, uint64(k), uint64(j))})
		}
	}
	st := FilterStats{Tasks: len(l.train), Rollouts: len(rs)}
	done, err := l.runRollouts(ctx, rs)
	if err != nil {
		return st, err
	}
	wins := make([]int, len(l.train))
	total := 0
	for i, r := range done {
		if r.Reward != nil && *r.Reward >= l.cfg.SuccessReward {
			wins[i/n]++
			total++
		}
	}
	var kept []json.RawMessage
	var buf bytes.Buffer
	keptWins := 0
	for k, w := range wins {
		switch {
		case w == 0:
			st.Unsolved++
		case w == n:
			st.Solved++
		default:
			kept = append(kept, l.train[k])
			keptWins += w
			buf.Write(l.train[k])
			buf.WriteByte('\n')
		}
	}
	st.Kept = len(kept)
	if len(done) > 0 {
		st.SuccessBefore = float64(total) / float64(len(done))
	}
	if len(kept) > 0 {
		st.SuccessOfKeptMean = float64(keptWins) / float64(len(kept)*n)
	}
	fmt.Fprintf(l.out, "difficulty filter: %d attempts per task: kept %d of %d tasks (%d always solved, %d never), success %.1f%% over %d rollouts\n",
		n, st.Kept, st.Tasks, st.Solved, st.Unsolved, 100*st.SuccessBefore, len(done))
	if len(kept) == 0 {
		return st, fmt.Errorf("difficulty filter: no task has 0 < success < %d of %d attempts (%d always solved, %d never): nothing to train", n, n, st.Solved, st.Unsolved)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return st, fmt.Errorf("difficulty filter: %w", err)
	}
	l.train = kept
	return st, nil
}
