package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/aglrl/agl/store"
)

// reward records the attempt's reward from the configured source (see
// RewardSource). Every reward the controller appends carries its source
// (store.SourceRewardFile, store.SourceEvaluator), which ranks it above what
// the harness posted, whenever that arrived.
func (c *runner) reward(ctx context.Context, a *attempt, code int) error {
	b, err := os.ReadFile(filepath.Join(a.dir, "reward"))
	if err != nil {
		return fmt.Errorf("reward file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if a.repo != nil {
		c.keepHarnessReward(ctx, a, b)
		return c.testsReward(ctx, a)
	}
	if c.cfg.RewardSource == RewardEvaluator {
		c.keepHarnessReward(ctx, a, b)
		return c.evaluatorReward(ctx, a, code)
	}
	if len(b) > 0 {
		data, err := rewardData(b, store.SourceRewardFile)
		if err != nil {
			return fmt.Errorf("reward file: %w", err)
		}
		return c.append(ctx, a, store.NewEvent{Type: store.EventReward, Data: data})
	}
	if c.cfg.RewardSource == RewardHarness {
		return nil // the harness's own reward events, if any
	}
	// RewardBoth: the harness's final reward event, if it posted one
	// (per-call rewards do not count), else the evaluator.
	evs, err := c.api.ListEvents(ctx, store.EventFilter{RolloutID: a.rid, AttemptID: a.aid, Types: []string{store.EventReward}})
	if err != nil {
		return fmt.Errorf("controller: list reward events: %w", err)
	}
	datas := make([]json.RawMessage, len(evs))
	for i, e := range evs {
		datas[i] = e.Data
	}
	if store.ResolveRewards(datas, store.Reward.PrimaryValue).Final >= 0 {
		return nil // the harness reported its own reward
	}
	return c.evaluatorReward(ctx, a, code)
}

// keepHarnessReward keeps a non-empty reward file as a diagnostic, never
// the reward.
func (c *runner) keepHarnessReward(ctx context.Context, a *attempt, b []byte) {
	if len(b) == 0 {
		return
	}
	text := a.redact(truncate(string(b), c.cfg.LogTailBytes))
	d, _ := json.Marshal(struct {
		Text  string `json:"text"`
		Bytes int    `json:"bytes"`
	}{text, len(b)})
	if err := c.append(ctx, a, store.NewEvent{Type: store.EventHarnessReward, Data: d}); err != nil {
		a.log.Warn("controller: record the harness's reward file", "err", err)
	}
}

// evaluatorReward runs the evaluator and appends its reward.
func (c *runner) evaluatorReward(ctx context.Context, a *attempt, code int) error {
	out, err := c.evaluate(ctx, a, code)
	if err != nil {
		return err
	}
	data, err := rewardData(out, store.SourceEvaluator)
	if err != nil {
		// Accept a chatty evaluator whose last line is the reward.
		if data, err = rewardData([]byte(lastLine(string(out))), store.SourceEvaluator); err != nil {
			return fmt.Errorf("evaluator output %q: %w", truncate(string(out), 200), err)
		}
	}
	return c.append(ctx, a, store.NewEvent{Type: store.EventReward, Data: data})
}

// evaluate runs the evaluator in its own process group and returns its stdout.
func (c *runner) evaluate(ctx context.Context, a *attempt, code int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.EvaluatorTimeout)
	defer cancel()
	cmd := exec.Command(c.cfg.Evaluator[0], c.cfg.Evaluator[1:]...)
	cmd.Dir = c.cfg.Dir
	cmd.Env = append(a.env[:len(a.env):len(a.env)], "AGL_LOG_FILE="+a.outPath, "AGL_STDERR_FILE="+a.errPath, "AGL_EXIT_CODE="+strconv.Itoa(code))
	var out bytes.Buffer
	errTail := &tailBuffer{max: c.cfg.LogTailBytes}
	cmd.Stdout, cmd.Stderr = &limitedWriter{w: &out, n: 1 << 20}, errTail
	setGroup(cmd)
	if err := procs.start(cmd); err != nil {
		return nil, fmt.Errorf("evaluator: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		procs.remove(pid)
		exited <- err
	}()
	var err error
	select {
	case err = <-exited:
		signalGroup(pid, syscall.SIGKILL)
		c.sweep(a)
	case <-ctx.Done():
		signalGroup(pid, syscall.SIGKILL)
		<-exited
		c.sweep(a)
		return nil, fmt.Errorf("evaluator: %w", context.Cause(ctx))
	}
	if err != nil {
		msg := "evaluator: " + exitMessage(err)
		if line := lastLine(errTail.String()); line != "" {
			msg += ": " + line
		}
		return nil, errors.New(msg)
	}
	return bytes.TrimSpace(out.Bytes()), nil
}

// rewardData validates a reward (a JSON number or an store.Reward object) and
// returns it as reward event data stamped with source.
func rewardData(b []byte, source string) (json.RawMessage, error) {
	b = bytes.TrimSpace(b)
	if _, err := store.ParseReward(b); err != nil {
		return nil, err
	}
	obj := map[string]json.RawMessage{}
	if len(b) > 0 && b[0] == '{' {
		if err := json.Unmarshal(b, &obj); err != nil {
			return nil, err
		}
	} else {
		obj["value"] = json.RawMessage(b)
	}
	obj["source"], _ = json.Marshal(source)
	return json.Marshal(obj)
}
