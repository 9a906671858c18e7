package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/aglrl/agl/app"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/trainer"
)

// scriptedRun is `agl train`'s whole stack (app.Train: the gateway with
// every mount, the controller running a real harness, the trainer loop)
// with a scripted engine in place of the model and a scripted policy in
// place of its trainer: the wiring without the numerics.
type scriptedRun struct {
	tmpl *chat.ChatML
	eng  *testutil.ScriptEngine
	pol  *scriptPolicy
}

// newScriptedRun makes a scripted run whose engine renders with tmpl (nil:
// chat.NewSmall's) and answers with replies, in order.
func newScriptedRun(t *testing.T, tmpl *chat.ChatML, replies []string) *scriptedRun {
	t.Helper()
	if tmpl == nil {
		var err error
		if tmpl, err = chat.NewSmall(); err != nil {
			t.Fatal(err)
		}
	}
	eng := &testutil.ScriptEngine{Tmpl: tmpl, ModelVersion: 1}
	for _, r := range replies {
		eng.Push(chat.Message{Role: chat.RoleAssistant, Content: r})
	}
	return &scriptedRun{tmpl: tmpl, eng: eng, pol: &scriptPolicy{}}
}

// train runs the config at cfgPath as `agl train CONFIG` does and
// returns what it printed.
func (r *scriptedRun) train(ctx context.Context, cfgPath string) (string, error) {
	c, err := app.Load(cfgPath)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	models := &app.Models{Backend: proxy.NewTokenBackend(r.eng, r.tmpl, r.tmpl.Tokenizer(), 0), Format: r.tmpl,
		Policies: []trainer.TrainedPolicy{{Name: "agl", Policy: r.pol}}}
	err = app.Train(ctx, c, app.TrainOptions{Options: app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Models: models},
		Stdout: &out})
	return out.String(), err
}

// distinctReplies are 97 three-character replies of capitals and digits
// (none holds a lower-case task letter) whose character codes sum to a
// different value mod 97 each: the harnesses' (Σ ord(c) mod 97)/97
// scores each differently.
func distinctReplies() []string {
	const chars = "GHIJKLMNOPQRSTUVWXYZ0123456789"
	seen := map[int]bool{}
	var out []string
	for _, a := range chars {
		for _, b := range chars {
			for _, c := range chars {
				if s := int(a+b+c) % 97; !seen[s] {
					seen[s] = true
					out = append(out, string([]rune{a, b, c}))
				}
			}
		}
	}
	return out
}

// scriptPolicy is the trained policy of a scripted run: each step records
// the samples it was given and reports as its gradient norm the norm of
// their weighted advantages (0 when nothing trains); SaveCheckpoint
// writes the steps taken to dir/script.json.
type scriptPolicy struct {
	mu    sync.Mutex
	steps [][]samples.Sample
}

func (p *scriptPolicy) Step(_ context.Context, ss []samples.Sample) (trainer.StepStats, error) {
	var sq float64
	n := 0
	for _, s := range ss {
		for i, m := range s.LossMask {
			if m != 0 && i < len(s.Weights) {
				sq += math.Pow(float64(s.Weights[i])*s.Advantage, 2)
				n++
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.steps = append(p.steps, ss)
	return trainer.StepStats{Loss: 0.1, GradNorm: math.Sqrt(sq), ApproxKL: 0.01, Tokens: n}, nil
}

// Publish has nothing to swap: the scripted engine serves one version.
func (p *scriptPolicy) Publish(context.Context, int64) error { return nil }

func (p *scriptPolicy) SaveCheckpoint(dir string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "script.json"), fmt.Appendf(nil, `{"steps":%d}`+"\n", len(p.steps)), 0o644)
}
