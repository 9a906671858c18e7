package tinker_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/model"
	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/trainer/embedded"
	"github.com/aglrl/agl/trainer/tinker"
	"github.com/aglrl/agl/trainer/tinker/tinkertest"
)

// TestTransformerLossSemantics: on the stand-in's transformer mode (an
// embedded model directory as the base model), one step of agl's tinker
// policy moves the weights as one step of the embedded policy on the
// same samples, for importance_sampling, ppo (clip active) and
// cross_entropy. Adam's ε is so large (with the learning rate equal to
// it) that the first update is −g to float precision, so the weights'
// change is the gradient, scale included.
func TestTransformerLossSemantics(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles and steps GoMLX transformers")
	}
	ctx := context.Background()
	const v = 64
	cfg, err := model.Preset("tiny", v)
	if err != nil {
		t.Fatal(err)
	}
	w0, err := model.NewRandom(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := w0.Save(dir); err != nil {
		t.Fatal(err)
	}
	m, err := model.New(cfg, model.TrainBackend(""))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := model.NewTrainer(m, w0, model.AdamW{LR: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Samples whose behaviour log-probs are the model's own ± 0.5 (so ppo
	// clips some tokens), with per-token weights and advantages.
	r := rand.New(rand.NewPCG(5, 1))
	var ss []samples.Sample
	var seqs [][]int32
	for k := range 6 {
		n := 12 + r.IntN(12)
		s := samples.Sample{RolloutID: string(rune('a' + k)), Advantage: r.Float64()*2 - 1,
			IDs: make([]int32, n), LossMask: make([]uint8, n), Logprobs: make([]float32, n), Weights: make([]float32, n)}
		for i := range s.IDs {
			s.IDs[i] = int32(r.IntN(v))
		}
		ss, seqs = append(ss, s), append(seqs, s.IDs)
	}
	lp, _, err := ref.LogProbs(ctx, seqs)
	if err != nil {
		t.Fatal(err)
	}
	for k := range ss {
		for i := 4; i < len(ss[k].IDs); i++ {
			ss[k].LossMask[i], ss[k].Weights[i] = 1, float32(0.05+0.1*r.Float64())
			ss[k].Logprobs[i] = lp[k][i] + float32(r.Float64()-0.5)
		}
	}
	const big = 1e6 // Adam's ε and learning rate: the first update is −g
	for _, tc := range []struct {
		loss string
		lc   model.PolicyLossConfig
	}{
		{tinker.LossImportanceSampling, model.PolicyLossConfig{ClipLow: 1, ClipHigh: 1e9}},
		{tinker.LossPPO, model.PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28}},
		{tinker.LossCrossEntropy, model.PolicyLossConfig{}},
	} {
		t.Run(tc.loss, func(t *testing.T) {
			s, err := tinkertest.NewTransformer(key, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			o := options(tc.loss)
			o.MicroBatchTokens = 48 // several forward_backward calls
			o.Adam = tinker.Adam{LearningRate: big, Beta1: 0.9, Beta2: 0.95, Eps: big}
			p := newPolicy(t, s, o)
			st, err := p.Step(ctx, ss)
			if err != nil {
				t.Fatal(err)
			}
			if bad := s.MalformedRequests(); len(bad) > 0 {
				t.Fatalf("refused: %q", bad)
			}
			if tc.loss == tinker.LossPPO && st.ClipFrac == 0 {
				t.Fatalf("no token clipped (%+v)", st)
			}
			got, err := s.Weights(s.Models()[0])
			if err != nil {
				t.Fatal(err)
			}
			// The embedded policy's step on the same samples.
			tr, err := model.NewTrainer(m, w0, model.AdamW{LR: big, Beta1: 0.9, Beta2: 0.95, Eps: big})
			if err != nil {
				t.Fatal(err)
			}
			var want *model.Weights
			if tc.loss == tinker.LossCrossEntropy {
				b := &model.Batch{}
				for _, x := range ss {
					b.IDs, b.Weights = append(b.IDs, x.IDs), append(b.Weights, x.Weights)
				}
				if _, err := tr.StepSFT(ctx, b); err != nil {
					t.Fatal(err)
				}
			} else {
				ep, err := embedded.New(tr, nil, nil, embedded.Options{Loss: tc.lc})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ep.Step(ctx, ss); err != nil {
					t.Fatal(err)
				}
			}
			if want, err = tr.Weights(); err != nil {
				t.Fatal(err)
			}
			var norm, diff float64
			for i, x := range w0.Tensors {
				for j, a := range x.Data {
					dw, dg := float64(want.Tensors[i].Data[j]-a), float64(got.Tensors[i].Data[j]-a)
					norm += dw * dw
					diff += (dg - dw) * (dg - dw)
				}
			}
			if norm == 0 || math.Sqrt(diff) > 1e-3*math.Sqrt(norm) {
				t.Fatalf("the stand-in's update differs from the embedded one: |Δ| = %g, |ref| = %g", math.Sqrt(diff), math.Sqrt(norm))
			}
			t.Logf("|update| %.4g, |difference| %.3g", math.Sqrt(norm), math.Sqrt(diff))
			if tc.loss != tinker.LossCrossEntropy {
				return
			}
			// Sampling serves the published weights: the log-probs that
			// come back are the updated model's own.
			if err := p.Publish(ctx, 2); err != nil {
				t.Fatal(err)
			}
			prompt := ss[0].IDs[:6]
			res, err := p.Engine().Generate(ctx, prompt, engine.Sampling{Temperature: 1, MaxTokens: 8, Seed: 9})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.IDs) == 0 || len(res.Logprobs) != len(res.IDs) || res.ModelVersion != 2 {
				t.Fatalf("sample: %d ids, %d logprobs, version %d", len(res.IDs), len(res.Logprobs), res.ModelVersion)
			}
			gt, err := model.NewTrainer(m, got, model.AdamW{LR: 1})
			if err != nil {
				t.Fatal(err)
			}
			tf, _, err := gt.LogProbs(ctx, [][]int32{append(append([]int32{}, prompt...), res.IDs...)})
			if err != nil {
				t.Fatal(err)
			}
			for i, x := range res.Logprobs {
				if y := tf[0][len(prompt)+i]; math.Abs(float64(x-y)) > 1e-3 {
					t.Fatalf("sampled token %d: log-prob %v, the updated model's %v", i, x, y)
				}
			}
		})
	}
}
