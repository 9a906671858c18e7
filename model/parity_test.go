package model

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/aglrl/agl/engine"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph DSL
	"github.com/gomlx/gomlx/core/tensors"
)

// parityGolden is testdata/parity/*/golden.json, written by
// testdata/parity/gen.py (an independent PyTorch implementation of Hugging
// Face's forward pass).
type parityGolden struct {
	IDs      []int32   `json:"ids"`
	LogProbs []float64 `json:"logprobs"`
	Logits   string    `json:"logits"`
}

// TestLogitParity loads each tiny random checkpoint of testdata/parity (one
// per config form: Qwen3 plain, rope_parameters, attention_bias, Qwen2,
// Llama 3.1 rope_scaling llama3, mlp_bias, attention_bias, BF16 sharded,
// yarn, linear, dynamic, Mistral) and checks agl's logits, LogProbs and the
// engine's log-probs against the reference's goldens to 1e-4. Where a
// fixture exists for a config field, dropping that field must move the
// logits (the fixture is sensitive to it).
func TestLogitParity(t *testing.T) {
	drop := map[string]func(c *Config){ // what agl used to do wrong, or ignoring the field
		"qwen3_rope_parameters": func(c *Config) { c.RopeTheta = 10000 },
		"llama31_rope_llama3":   func(c *Config) { c.RopeScaling = nil },
		"qwen3_yarn":            func(c *Config) { c.RopeScaling = nil },
		"llama_linear":          func(c *Config) { c.RopeScaling = nil },
	}
	dirs, _ := filepath.Glob("testdata/parity/*/golden.json")
	if len(dirs) < 12 {
		t.Fatalf("%d parity fixtures, want 12", len(dirs))
	}
	for _, g := range dirs {
		dir := filepath.Dir(g)
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			var gold parityGolden
			b, err := os.ReadFile(g)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &gold); err != nil {
				t.Fatal(err)
			}
			w, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join(dir, gold.Logits))
			if err != nil {
				t.Fatal(err)
			}
			v := w.Config.VocabSize
			want := make([]float32, len(raw)/4)
			for i := range want {
				want[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			if len(want) != len(gold.IDs)*v {
				t.Fatalf("%d golden logits for %d ids x %d vocab", len(want), len(gold.IDs), v)
			}
			m, err := New(w.Config, os.Getenv("AGL_TEST_BACKEND"))
			if err != nil {
				t.Fatal(err)
			}
			d, err := m.Upload(w)
			if err != nil {
				t.Fatal(err)
			}
			got := fullLogits(t, m, d, gold.IDs)
			logitDiff := maxAbsDiff(got, want)
			if logitDiff > 1e-4 {
				t.Errorf("logits differ from the reference by %.3g", logitDiff)
			}
			lp, _, err := m.LogProbs(context.Background(), d, [][]int32{gold.IDs})
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for i := 1; i < len(gold.IDs); i++ {
				worst = math.Max(worst, math.Abs(float64(lp[0][i])-gold.LogProbs[i]))
			}
			if worst > 1e-4 {
				t.Errorf("LogProbs differ from the reference by %.3g", worst)
			}
			// The engine's first sampled token, after a prompt of 10 ids.
			e, err := NewEngine(m, w, 1, EngineOptions{MaxBatch: 1, MaxContext: 64})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			const k = 10
			res, err := e.Generate(context.Background(), gold.IDs[:k], engine.Sampling{Temperature: 1, MaxTokens: 1, Seed: 7})
			if err != nil {
				t.Fatal(err)
			}
			row := make([]float64, v)
			for j := range row {
				row[j] = float64(want[(k-1)*v+j])
			}
			ref := logSoftmax64(row)[res.IDs[0]]
			if math.Abs(float64(res.Logprobs[0])-ref) > 1e-4 {
				t.Errorf("engine log-prob %v, reference %v", res.Logprobs[0], ref)
			}
			t.Logf("max |logit - reference| %.2g, |LogProbs - reference| %.2g, |engine - reference| %.2g",
				logitDiff, worst, math.Abs(float64(res.Logprobs[0])-ref))
			if f := drop[name]; f != nil {
				cfg := w.Config
				f(&cfg)
				m2, err := New(cfg, os.Getenv("AGL_TEST_BACKEND"))
				if err != nil {
					t.Fatal(err)
				}
				diff := maxAbsDiff(fullLogits(t, m2, d, gold.IDs), want)
				if diff < 1e-2 {
					t.Errorf("without the field the logits move by only %.3g: the fixture does not test it", diff)
				}
				t.Logf("without the field: logits off by %.2g", diff)
			}
		})
	}
}

// fullLogits runs the model over ids and returns the logits [T, V], flat.
func fullLogits(t *testing.T, m *Model, d *DeviceWeights, ids []int32) []float32 {
	t.Helper()
	np := len(m.cfg.Params())
	exec, err := NewExec(m.backend, func(g *Graph, ins []*Node) []*Node {
		n := newNet(m.cfg, ins[:np])
		x := ins[np]
		pos := Iota(g, shapes.Make(dtypes.Int32, 1, x.Shape().Dim(1)), 1)
		h := n.decoder(x, pos, func(_ int, k, v *Node) (*Node, *Node, *Node) { return causalKV(k, v) })
		return []*Node{n.logits(h)}
	})
	if err != nil {
		t.Fatal(err)
	}
	outs, err := exec.Call(append(d.args(), tensors.FromFlatDataAndDimensions(append([]int32(nil), ids...), 1, len(ids)))...)
	if err != nil {
		t.Fatal(err)
	}
	return tensors.MustCopyFlatData[float32](outs[0])
}

func maxAbsDiff(a, b []float32) float64 {
	worst := 0.0
	for i := range a {
		worst = math.Max(worst, math.Abs(float64(a[i]-b[i])))
	}
	return worst
}
