package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aglrl/agl/internal/testutil"
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
	if testing.Short() {
		t.Skip("trains a model")
	}
	testutil.SkipRace(t, "400 training steps on one goroutine: numerics")
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

// pgBatch makes a policy-gradient batch with weights normalized over it.
func pgBatch(rng *rand.Rand, n int) *Batch {
	b := copyTask(rng, n, 5)
	for i, ids := range b.IDs {
		m, beh, adv := make([]float32, len(ids)), make([]float32, len(ids)), make([]float32, len(ids))
		a := float32(rng.NormFloat64())
		for j := range ids {
			if b.Weights[i][j] != 0 {
				m[j] = 1
			}
			beh[j] = -float32(rng.Float64()) * 3
			adv[j] = a
		}
		b.Mask, b.Behavior, b.Advantages = append(b.Mask, m), append(b.Behavior, beh), append(b.Advantages, adv)
	}
	return b
}

func TestAccumulatedStepMatchesFullBatch(t *testing.T) {
	cfg := tinyConfig(TypeQwen3)
	w, err := NewRandom(cfg, 21)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	full, _ := NewTrainer(m, w, DefaultAdamW())
	acc, _ := NewTrainer(m, w, DefaultAdamW())
	rng := rand.New(rand.NewPCG(8, 9))
	b := pgBatch(rng, 8)
	lc := PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28, DualClip: 3, EntropyCoef: 0.01}
	ctx := context.Background()
	sf, err := full.StepPolicy(ctx, b, lc)
	if err != nil {
		t.Fatal(err)
	}
	half := func(lo, hi int) *Batch {
		return &Batch{IDs: b.IDs[lo:hi], Weights: b.Weights[lo:hi], Mask: b.Mask[lo:hi], Behavior: b.Behavior[lo:hi], Advantages: b.Advantages[lo:hi]}
	}
	s1, err := acc.AccumulatePolicy(ctx, half(0, 3), lc)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := acc.AccumulatePolicy(ctx, half(3, 8), lc)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := acc.ApplyGradients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(s1.Loss+s2.Loss-sf.Loss) > 1e-5 || math.Abs(sa.GradNorm-sf.GradNorm) > 1e-4*sf.GradNorm || sa.Step != 1 || sa.Tokens != sf.Tokens {
		t.Errorf("accumulated loss %v+%v norm %v step %d tokens %d; full loss %v norm %v tokens %d",
			s1.Loss, s2.Loss, sa.GradNorm, sa.Step, sa.Tokens, sf.Loss, sf.GradNorm, sf.Tokens)
	}
	wf, _ := full.Weights()
	wa, _ := acc.Weights()
	for i := range wf.Tensors {
		for j := range wf.Tensors[i].Data {
			if d := math.Abs(float64(wf.Tensors[i].Data[j] - wa.Tensors[i].Data[j])); d > 1e-5 {
				t.Fatalf("tensor %d[%d]: full %v accumulated %v", i, j, wf.Tensors[i].Data[j], wa.Tensors[i].Data[j])
			}
		}
	}
	if _, err := acc.ApplyGradients(ctx); err == nil {
		t.Error("apply without accumulated gradients: no error")
	}
}

func TestPolicyStepImprovesAdvantagedTokens(t *testing.T) {
	// With positive advantages on a fixed batch, repeated policy steps
	// must raise those tokens' log-probs.
	cfg := tinyConfig(TypeQwen3)
	w, _ := NewRandom(cfg, 4)
	m, err := New(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := NewTrainer(m, w, DefaultAdamW())
	rng := rand.New(rand.NewPCG(1, 3))
	b := pgBatch(rng, 4)
	for i := range b.Advantages {
		for j := range b.Advantages[i] {
			b.Advantages[i][j] = 1
		}
	}
	ctx := context.Background()
	before, _, err := m.LogProbs(ctx, mustUpload(t, m, w), b.IDs)
	if err != nil {
		t.Fatal(err)
	}
	// Behavior = current log-probs (on-policy).
	for i := range b.Behavior {
		copy(b.Behavior[i], before[i])
	}
	for range 5 {
		if _, err := tr.StepPolicy(ctx, b, PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.2}); err != nil {
			t.Fatal(err)
		}
	}
	after, _, err := tr.LogProbs(ctx, b.IDs)
	if err != nil {
		t.Fatal(err)
	}
	var gain float64
	for i := range b.Mask {
		for j, mk := range b.Mask[i] {
			gain += float64(mk * (after[i][j] - before[i][j]))
		}
	}
	if gain <= 0 {
		t.Errorf("masked log-prob change %v, want > 0", gain)
	}
}

func mustUpload(t *testing.T, m *Model, w *Weights) *DeviceWeights {
	t.Helper()
	d, err := m.Upload(w)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestTrainBackendMatchesSequential trains the same model on TrainBackend
// (ops in parallel) and on the sequential DefaultBackend: every step's loss
// and the final weights agree. The 1m preset's batch is wide enough for
// several matrix multiplications to fan out at once, which is how the
// parallel executor's default pool deadlocked; a hang fails the test at its
// deadline instead of stalling the suite.
func TestTrainBackendMatchesSequential(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the 1m preset twice (minutes)")
	}
	testutil.SkipRace(t, "trains the 1m preset twice: numerics, and GoMLX's executor, not agl's concurrency")
	cfg, err := Preset("1m", 265)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewRandom(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	b := &Batch{}
	for range 8 {
		ids, wt := make([]int32, 96), make([]float32, 96)
		for j := range ids {
			ids[j] = int32(rng.IntN(265))
			wt[j] = 1.0 / 768
		}
		b.IDs, b.Weights = append(b.IDs, ids), append(b.Weights, wt)
	}
	train := func(backend string) ([]float64, *Weights) {
		m, err := New(cfg, backend)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewTrainer(m, w, DefaultAdamW())
		if err != nil {
			t.Fatal(err)
		}
		var losses []float64
		for range 6 {
			st, err := tr.StepSFT(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, st.Loss)
		}
		out, err := tr.Weights()
		if err != nil {
			t.Fatal(err)
		}
		return losses, out
	}
	// The sequential run first: its time bounds the parallel one's (which
	// is faster when it works), so a loaded machine or the race detector
	// slowing both is not taken for a hang.
	start := time.Now()
	seq, ws := train(DefaultBackend)
	limit := max(3*time.Minute, 4*time.Since(start))
	done := make(chan struct{})
	var par []float64
	var wp *Weights
	go func() {
		defer close(done)
		par, wp = train(TrainBackend(""))
	}()
	select {
	case <-done:
	case <-time.After(limit):
		panic(fmt.Sprintf("training on %q hung: 6 steps did not finish in %v (4x the sequential backend's time, at least 3 minutes)", TrainBackend(""), limit.Round(time.Second)))
	}
	for i := range seq {
		if math.Abs(par[i]-seq[i]) > 1e-5*max(1, math.Abs(seq[i])) {
			t.Errorf("step %d loss: parallel %v, sequential %v", i+1, par[i], seq[i])
		}
	}
	if par[len(par)-1] >= par[0] {
		t.Errorf("loss did not fall: %v", par)
	}
	for i := range ws.Tensors {
		for j := range ws.Tensors[i].Data {
			if d := math.Abs(float64(wp.Tensors[i].Data[j] - ws.Tensors[i].Data[j])); d > 1e-5 {
				t.Fatalf("tensor %d[%d]: parallel %v, sequential %v", i, j, wp.Tensors[i].Data[j], ws.Tensors[i].Data[j])
			}
		}
	}
}
