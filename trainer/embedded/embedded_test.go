package embedded

import (
	"context"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/aglrl/agl/model"
	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/trainer"
)

// TestOptionsFrom: the trainer section's loss settings reach the model's
// policy loss unchanged, and unset ones get the section's defaults (an
// empty section once gave a clip of zero: ratios above 1+0 were cut).
func TestOptionsFrom(t *testing.T) {
	tests := []struct {
		cfg  trainer.Config
		want Options
	}{
		{trainer.Config{}, Options{Loss: model.PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28}, MicroBatchTokens: 4096, Epochs: 1}},
		{trainer.Config{ClipLow: 0.1, ClipHigh: 0.3, DualClip: 3, TISCap: 2, KLCoef: 0.05, KLK1: true, EntropyCoef: 0.01, PPOEpochs: 4, MicroBatchTokens: 512},
			Options{Loss: model.PolicyLossConfig{ClipLow: 0.1, ClipHigh: 0.3, DualClip: 3, TISCap: 2, KLCoef: 0.05, KLK1: true, EntropyCoef: 0.01},
				MicroBatchTokens: 512, Epochs: 4}},
	}
	for _, tc := range tests {
		if got := OptionsFrom(tc.cfg); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("OptionsFrom(%+v) = %+v, want %+v", tc.cfg, got, tc.want)
		}
	}
}

// recorder is a model.Trainer that records what each pass got.
type recorder struct {
	*model.Trainer
	batches []*model.Batch
	losses  []model.PolicyLossConfig
	applied int
}

func (r *recorder) AccumulatePolicy(ctx context.Context, b *model.Batch, lc model.PolicyLossConfig) (model.StepStats, error) {
	r.batches, r.losses = append(r.batches, b), append(r.losses, lc)
	return r.Trainer.AccumulatePolicy(ctx, b, lc)
}

func (r *recorder) ApplyGradients(ctx context.Context) (model.StepStats, error) {
	r.applied++
	return r.Trainer.ApplyGradients(ctx)
}

type capture struct {
	w       *model.Weights
	version int64
}

func (c *capture) Publish(ctx context.Context, w *model.Weights, version int64) error {
	c.w, c.version = w, version
	return nil
}

// fixture is a tiny model, its weights and samples whose behaviour
// log-probs are the model's own shifted by shift (ratio exp(−shift)), with
// advantage adv on every response token.
func fixture(t *testing.T, shift float32, adv float64) (*model.Model, *model.Weights, []samples.Sample) {
	t.Helper()
	cfg, err := model.Preset("tiny", 64)
	if err != nil {
		t.Fatal(err)
	}
	w, err := model.NewRandom(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.Upload(w)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var ss []samples.Sample
	for range 4 {
		n := 24
		s := samples.Sample{IDs: make([]int32, n), LossMask: make([]uint8, n), Weights: make([]float32, n), Advantage: adv}
		for i := range s.IDs {
			s.IDs[i] = int32(rng.IntN(64))
			if i >= 8 {
				s.LossMask[i], s.Weights[i] = 1, 1.0/64
			}
		}
		ss = append(ss, s)
	}
	seqs := make([][]int32, len(ss))
	for i := range ss {
		seqs[i] = ss[i].IDs
	}
	lp, _, err := m.LogProbs(context.Background(), d, seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ss {
		ss[i].Logprobs = make([]float32, len(lp[i]))
		for j, v := range lp[i] {
			if ss[i].LossMask[j] == 1 {
				ss[i].Logprobs[j] = v - shift
			}
		}
	}
	return m, w, ss
}

func flat(w *model.Weights) []float32 {
	var out []float32
	for _, x := range w.Tensors {
		out = append(out, x.Data...)
	}
	return out
}

// TestStep: one policy step of the embedded policy, for each loss option:
// epochs make that many optimizer updates over the same samples and end
// elsewhere than one; the KL penalty needs (and uses) the reference;
// dual-clip zeroes the gradient of negative-advantage tokens whose ratio
// exceeds c; TIS computes π_old before the first update. Epochs 1 is
// exactly one accumulate-and-apply pass over the micro-batches.
func TestStep(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := model.PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28}
	type result struct {
		w     []float32
		st    trainer.StepStats
		rec   *recorder
		steps int64
	}
	step := func(t *testing.T, shift float32, adv float64, o Options, withRef bool) result {
		m, w, ss := fixture(t, shift, adv)
		tr, err := model.NewTrainer(m, w, model.AdamW{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
		if err != nil {
			t.Fatal(err)
		}
		var ref Reference
		if withRef {
			if ref, err = NewReference(m, w); err != nil {
				t.Fatal(err)
			}
		}
		rec := &recorder{Trainer: tr}
		pub := &capture{}
		p, err := New(rec, pub, ref, o)
		if err != nil {
			t.Fatal(err)
		}
		st, err := p.Step(ctx, ss)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Publish(ctx, 2); err != nil || pub.version != 2 {
			t.Fatalf("publish: %v (version %d)", err, pub.version)
		}
		return result{flat(pub.w), st, rec, tr.Step()}
	}
	one := step(t, 0, 1, Options{Loss: base, MicroBatchTokens: 48}, false)
	tests := []struct {
		name    string
		shift   float32
		adv     float64
		o       Options
		withRef bool
		check   func(t *testing.T, r result)
	}{
		{"epochs 1 is one pass", 0, 1, Options{Loss: base, MicroBatchTokens: 48}, false, func(t *testing.T, r result) {
			if r.rec.applied != 1 || r.steps != 1 || len(r.rec.batches) != 2 {
				t.Errorf("%d updates, %d passes over micro-batches, want 1 and 2", r.rec.applied, len(r.rec.batches))
			}
			// The same step by hand: accumulate every micro-batch, apply once.
			m, w, ss := fixture(t, 0, 1)
			tr, _ := model.NewTrainer(m, w, model.AdamW{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
			for _, b := range r.rec.batches {
				if _, err := tr.AccumulatePolicy(ctx, b, base); err != nil {
					t.Fatal(err)
				}
			}
			tr.ApplyGradients(ctx)
			hw, _ := tr.Weights()
			if !slices.Equal(flat(hw), r.w) {
				t.Errorf("epochs 1 differs from one accumulate-and-apply pass")
			}
			_ = ss
		}},
		{"epochs 3", 0, 1, Options{Loss: base, MicroBatchTokens: 48, Epochs: 3}, false, func(t *testing.T, r result) {
			if r.rec.applied != 3 || r.steps != 3 || len(r.rec.batches) != 6 {
				t.Errorf("%d updates, %d passes, want 3 and 6", r.rec.applied, len(r.rec.batches))
			}
			if slices.Equal(r.w, one.w) {
				t.Errorf("3 epochs ended at the weights of 1")
			}
			// Later epochs' ratio moved off 1: some tokens clip.
			if r.st.ClipFrac == 0 || one.st.ClipFrac != 0 {
				t.Errorf("clip fraction %v after 3 epochs, %v after 1", r.st.ClipFrac, one.st.ClipFrac)
			}
		}},
		{"kl penalty", 0, 1, Options{Loss: model.PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28, KLCoef: 1}, MicroBatchTokens: 48, Epochs: 2}, true, func(t *testing.T, r result) {
			for _, b := range r.rec.batches {
				if b.RefLogp == nil {
					t.Fatalf("a pass without reference log-probs")
				}
			}
			noKL := step(t, 0, 1, Options{Loss: base, MicroBatchTokens: 48, Epochs: 2}, false)
			if slices.Equal(r.w, noKL.w) {
				t.Errorf("the KL penalty changed nothing")
			}
		}},
		{"dual clip", 2, -1, Options{Loss: model.PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28, DualClip: 3}}, false, func(t *testing.T, r result) {
			// ratio e² > 3 on every token, A < 0: the loss is −A·c, flat.
			noDual := step(t, 2, -1, Options{Loss: base}, false)
			if r.st.GradNorm != 0 || noDual.st.GradNorm == 0 {
				t.Errorf("gradient norm %v with dual clip, %v without", r.st.GradNorm, noDual.st.GradNorm)
			}
		}},
		{"tis", 0.5, 1, Options{Loss: model.PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28, TISCap: 2}, Epochs: 2}, false, func(t *testing.T, r result) {
			for i, b := range r.rec.batches {
				if b.OldLogp == nil || r.rec.losses[i].TISCap != 2 {
					t.Fatalf("pass %d: old log-probs %v, TIS cap %v", i, b.OldLogp != nil, r.rec.losses[i].TISCap)
				}
				// π_old is the step's starting weights in every epoch.
				if !reflect.DeepEqual(b.OldLogp, r.rec.batches[0].OldLogp) {
					t.Errorf("pass %d recomputed π_old", i)
				}
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, step(t, tc.shift, tc.adv, tc.o, tc.withRef))
		})
	}
	if _, err := New(&recorder{}, &capture{}, nil, Options{Loss: model.PolicyLossConfig{KLCoef: 0.1}}); err == nil {
		t.Errorf("kl_coef without a reference was accepted")
	}
}
