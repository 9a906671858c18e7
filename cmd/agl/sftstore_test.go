package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/app"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/store"
)

// TestSFTFromStore: agl train's stack fills a real store through the
// gateway (the letter harness, a real Python subprocess, on a scripted
// engine rendering with a tiny model's template, half its replies
// scoring 1 and half 0); `agl sft --from` then selects its rollouts by
// reward and mode, from the data dir and from a running gateway's API
// alike (the same samples), trains the tiny model on them, and refuses an
// empty selection before any step, naming the filter.
func TestSFTFromStore(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfgPath := letterTrainDir(t, ctx, dir, func(harness string) string {
		return fmt.Sprintf(`data_dir: run
proxy: {train: {temperature: 1.0}}
controller: {command: [python3, %q], concurrency: 4}
trainer: {tasks: tasks.jsonl, steps: 1, tasks_per_step: 2, group_size: 4, lr: 0.01, val_limit: 2, seed: 3}
`, harness)
	})
	var out bytes.Buffer
	runDir, modelDir := filepath.Join(dir, "run"), filepath.Join(dir, "model")
	tmpl, err := chat.LoadDir(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	// Distinct replies (sft --from leaves duplicate samples out): the
	// train rollouts' (the 8 after the 2 of validation at step 0)
	// alternately lower-case (reward 1) and capitals (reward 0), the
	// validations' capitals.
	var replies []string
	for k := range 20 {
		r := string([]rune{'g' + rune(k), 'z', 'y'})
		if k < 1 || k > 4 {
			r = strings.ToUpper(r)
		}
		replies = append(replies, r, strings.ToUpper(r)+"X")
	}
	if o, err := newScriptedRun(t, tmpl.(*chat.ChatML), replies).train(ctx, cfgPath); err != nil {
		t.Fatalf("train: %v\n%s", err, o)
	}
	// What the store holds: the train rollouts whose reward reached 0.5.
	st, err := app.OpenStore(ctx, config.Config{DataDir: runDir}, newLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rs, _, err := st.ListRollouts(ctx, store.RolloutFilter{Mode: store.ModeTrain, Limit: 100})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range rs {
		if r.Reward != nil && *r.Reward >= 0.5 {
			want = append(want, r.ID)
		}
	}
	if len(want) == 0 || len(want) == len(rs) {
		t.Fatalf("%d of %d train rollouts reached reward 0.5: the filter would select all or none", len(want), len(rs))
	}
	slices.Sort(want)
	line := regexp.MustCompile(`(?m)^(\S+-s1-t\d-r\d)\s+\S+\s+-\s+1\s+(\d+)\s+(\d+)\s+(\S+)$`)
	dryRun := func(from string) string {
		t.Helper()
		var o bytes.Buffer
		if err := run(ctx, []string{"sft", "--model", modelDir, "--from", from, "--min-reward", "0.5", "--mode", "train", "--dry-run"}, &o, &o); err != nil {
			t.Fatalf("sft --from %s --dry-run: %v\n%s", from, err, o.String())
		}
		var got []string
		for _, m := range line.FindAllStringSubmatch(o.String(), -1) {
			got = append(got, m[1])
			if n, k := atoi(t, m[2]), atoi(t, m[3]); k == 0 || k >= n {
				t.Errorf("%s: %s tokens, %s trained: want the prompt untrained, the reply trained", m[1], m[2], m[3])
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("--from %s selected %v, want the train rollouts with reward ≥ 0.5: %v\n%s", from, got, want, o.String())
		}
		if !strings.Contains(o.String(), fmt.Sprintf("(reward ≥ 0.5, mode train): %d samples", len(want))) {
			t.Errorf("no totals line:\n%s", o.String())
		}
		return o.String()
	}
	fromDir := dryRun(runDir)

	// The same selection through a running gateway's API.
	t.Setenv("AGL_ADMIN_KEY", "sft-key")
	addr := testutil.FreeAddr(t)
	gctx, stopGateway := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	gwDone := make(chan error, 1)
	go func() {
		gwDone <- run(gctx, []string{"gateway", "--data-dir", runDir, "--listen", addr}, pw, io.Discard)
		pw.Close()
	}()
	ready := make(chan struct{})
	go func(ready chan struct{}) {
		buf := make([]byte, 4096)
		var seen strings.Builder
		for {
			n, err := pr.Read(buf)
			seen.Write(buf[:n])
			if strings.Contains(seen.String(), "listening") && ready != nil {
				close(ready)
				ready = nil
			}
			if err != nil {
				return
			}
		}
	}(ready)
	select {
	case <-ready:
	case err := <-gwDone:
		t.Fatalf("gateway: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not start")
	}
	fromURL := dryRun("http://" + addr)
	if a, b := strings.ReplaceAll(fromURL, "http://"+addr, "X"), strings.ReplaceAll(fromDir, runDir, "X"); a != b {
		t.Errorf("gateway and data dir differ:\n%s\n%s", a, b)
	}
	stopGateway()
	if err := <-gwDone; err != nil {
		t.Errorf("gateway: %v", err)
	}

	// An empty selection is refused before any step, naming the filter.
	for _, args := range [][]string{{"--min-reward", "2"}, {"--rl-steps", "5..9"}, {"--mode", "val", "--agent", "nobody"}} {
		outDir := filepath.Join(dir, "empty")
		err := run(ctx, append([]string{"sft", "--model", modelDir, "--from", runDir, "--out", outDir}, args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "no stored call to train on matches the filter") {
			t.Errorf("%v: error %v, want an empty selection refused", args, err)
		}
		if _, serr := os.Stat(outDir); !os.IsNotExist(serr) {
			t.Errorf("%v: trained anyway", args)
		}
	}
	if err := run(ctx, []string{"sft", "--model", modelDir, "--data", cfgPath, "--min-reward", "1", "--out", filepath.Join(dir, "x")}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "need --from") {
		t.Errorf("--min-reward without --from: %v", err)
	}

	// Training on the selection writes a checkpoint.
	outDir := filepath.Join(dir, "rft")
	out.Reset()
	if err := run(ctx, []string{"sft", "--model", modelDir, "--from", runDir, "--min-reward", "0.5", "--out", outDir, "--steps", "3", "--batch-size", "2"}, &out, &out); err != nil {
		t.Fatalf("sft --from: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), fmt.Sprintf("sft: %d conversations, 3 steps of 2", len(want))) {
		t.Errorf("sft --from trained on other data:\n%s", out.String())
	}
	if diff := diffDirs(modelDir, outDir); diff == "" {
		t.Errorf("the checkpoint equals the model it started from")
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
