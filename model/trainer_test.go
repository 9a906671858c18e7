package model

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/aglrl/agl/samples"
	"github.com/gomlx/compute"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph DSL
	"github.com/gomlx/gomlx/core/tensors"
)

// copyTask makes sequences BOS x1..xk SEP x1..xk with weights on the copy.
func copyTask(rng *rand.Rand, n, k int) *Batch {
	b := &Batch{}
	var total float32
	for range n {
		ids := []int32{1}
		for range k {
			ids = append(ids, int32(4+rng.IntN(12)))
		}
		ids = append(ids, 2)
		ids = append(ids, ids[1:k+1]...)
		w := make([]float32, len(ids))
		for j := k + 2; j < len(ids); j++ {
			w[j] = 1
			total++
		}
		b.IDs = append(b.IDs, ids)
		b.Weights = append(b.Weights, w)
	}
	for _, w := range b.Weights {
		for j := range w {
			w[j] /= total
		}
	}
	return b
}

func TestSFTLearnsCopyTask(t *testing.T) {
	cfg := tinyConfig(TypeQwen3)
	cfg.VocabSize = 16
	w, err := NewRandom(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	opt := DefaultAdamW()
	opt.LR = 3e-3
	tr, err := NewTrainer(m, w, opt)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var first, last float64
	const bound = 0.15 // nats per copied token; chance is ln 12 ≈ 2.48
	for step := range 400 {
		st, err := tr.StepSFT(context.Background(), copyTask(rng, 16, 6))
		if err != nil {
			t.Fatal(err)
		}
		if step == 0 {
			first = st.Loss
		}
		last = st.Loss
		if last < bound {
			t.Logf("step %d: loss %.4f (first %.4f)", step, last, first)
			return
		}
	}
	t.Fatalf("loss %.4f after 400 steps (first %.4f), want < %v", last, first, bound)
}

func TestPolicyLossMatchesReference(t *testing.T) {
	const n = 64
	rng := rand.New(rand.NewPCG(3, 4))
	vals := func(f func() float64) []float64 {
		s := make([]float64, n)
		for i := range s {
			s[i] = f()
		}
		return s
	}
	logp := vals(func() float64 { return -rng.Float64() * 3 })
	beh := vals(func() float64 { return -rng.Float64() * 3 })
	old := vals(func() float64 { return -rng.Float64() * 3 })
	ref := vals(func() float64 { return -rng.Float64() * 3 })
	adv := vals(func() float64 { return rng.NormFloat64() })
	wt := vals(func() float64 { return rng.Float64() })
	mask := vals(func() float64 { return float64(min(1, rng.IntN(4))) })
	ent := vals(func() float64 { return rng.Float64() })
	cases := []struct {
		name string
		cfg  samples.LossConfig
		old  bool
		ref  bool
	}{
		{"ppo", samples.LossConfig{ClipLow: 0.2, ClipHigh: 0.28}, false, false},
		{"dual+ent", samples.LossConfig{ClipLow: 0.2, ClipHigh: 0.2, DualClip: 3, EntropyCoef: 0.01}, false, false},
		{"tis+k3", samples.LossConfig{ClipLow: 0.2, ClipHigh: 0.28, TISCap: 2, KLCoef: 0.1}, true, true},
		{"k1+clamp", samples.LossConfig{ClipLow: 0.1, ClipHigh: 0.1, KLCoef: 0.05, KL: samples.KLK1, LogRatioClamp: 0.5}, false, true},
	}
	exec := MustNewExec(mustBackend(t), func(g *Graph, x []*Node) []*Node {
		loss, stats := policyLoss(policyLossInputs{logp: x[0], entropy: x[1], w: x[2], mask: x[3], behavior: x[4], old: x[5], ref: x[6], adv: x[7],
			clipLow: x[8], clipHigh: x[9], dual: x[10], tis: x[11], klCoef: x[12], klK3: x[13], entCoef: x[14], clamp: x[15], hasOld: x[16]})
		return append([]*Node{loss, Gradient(loss, x[0])[0]}, stats...)
	})
	f32s := func(s []float64) *tensors.Tensor {
		o := make([]float32, len(s))
		for i, v := range s {
			o[i] = float32(v)
		}
		return tensors.FromFlatDataAndDimensions(o, 1, len(o))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := samples.LossInputs{Logp: logp, Behavior: beh, Advantage: adv, Weight: wt, Mask: mask, Entropy: ent}
			oldArg, hasOld := beh, 0.0
			if tc.old {
				in.OldLogp, oldArg, hasOld = old, old, 1
			}
			refArg, klCoef := make([]float64, n), 0.0
			if tc.ref {
				in.RefLogp, refArg, klCoef = ref, ref, tc.cfg.KLCoef
			}
			want, st, err := samples.PolicyLoss(tc.cfg, in)
			if err != nil {
				t.Fatal(err)
			}
			klK3 := 1.0
			if tc.cfg.KL == samples.KLK1 {
				klK3 = 0
			}
			clamp := tc.cfg.LogRatioClamp
			if clamp == 0 {
				clamp = 20
			}
			outs := exec.MustCall(f32s(logp), f32s(ent), f32s(wt), f32s(mask), f32s(beh), f32s(oldArg), f32s(refArg), f32s(adv),
				f32(tc.cfg.ClipLow), f32(tc.cfg.ClipHigh), f32(tc.cfg.DualClip), f32(tc.cfg.TISCap), f32(klCoef), f32(klK3),
				f32(tc.cfg.EntropyCoef), f32(clamp), f32(hasOld))
			got := float64(tensors.ToScalar[float32](outs[0]))
			if math.Abs(got-want) > 1e-4*math.Max(1, math.Abs(want)) {
				t.Errorf("loss %v, reference %v", got, want)
			}
			grad := tensors.MustCopyFlatData[float32](outs[1])
			for i := range grad {
				if math.Abs(float64(grad[i])-st.Grad[i]) > 1e-4 {
					t.Errorf("grad[%d] = %v, reference %v", i, grad[i], st.Grad[i])
				}
			}
			if cf := float64(tensors.ToScalar[float32](outs[3])); math.Abs(cf-st.ClipFrac) > 1e-6 {
				t.Errorf("clip fraction %v, reference %v", cf, st.ClipFrac)
			}
		})
	}
}

func mustBackend(t testing.TB) compute.Backend {
	b, err := Backend("")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCheckpointResumesExactly(t *testing.T) {
	cfg := tinyConfig(TypeQwen2)
	w, err := NewRandom(cfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	opt := DefaultAdamW()
	a, err := NewTrainer(m, w, opt)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	ctx := context.Background()
	if _, err := a.StepSFT(ctx, copyTask(rng, 4, 5)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := a.SaveCheckpoint(dir); err != nil {
		t.Fatal(err)
	}
	b, err := LoadTrainer(m, dir, AdamW{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Step() != 1 || b.Opt != opt {
		t.Fatalf("resumed step %d opt %+v, want 1 %+v", b.Step(), b.Opt, opt)
	}
	batch := copyTask(rng, 4, 5)
	sa, err := a.StepSFT(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.StepSFT(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if sa.Loss != sb.Loss || sa.GradNorm != sb.GradNorm {
		t.Errorf("resumed step differs: %+v vs %+v", sa, sb)
	}
	wa, _ := a.Weights()
	wb, _ := b.Weights()
	for i := range wa.Tensors {
		for j := range wa.Tensors[i].Data {
			if wa.Tensors[i].Data[j] != wb.Tensors[i].Data[j] {
				t.Fatalf("tensor %d[%d]: %v vs %v", i, j, wa.Tensors[i].Data[j], wb.Tensors[i].Data[j])
			}
		}
	}
}

func TestWeightsSaveLoadBitExact(t *testing.T) {
	w, err := NewRandom(tinyConfig(TypeQwen3), 3)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := w.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config.NumParams() != w.Config.NumParams() {
		t.Fatalf("config changed: %+v", got.Config)
	}
	for i := range w.Tensors {
		for j := range w.Tensors[i].Data {
			if math.Float32bits(got.Tensors[i].Data[j]) != math.Float32bits(w.Tensors[i].Data[j]) {
				t.Fatalf("tensor %d[%d] differs", i, j)
			}
		}
	}
}
