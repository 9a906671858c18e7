package samples

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestPolicyLossHandTable(t *testing.T) {
	ln := math.Log
	clip := LossConfig{ClipLow: 0.2, ClipHigh: 0.28, DualClip: 3}
	tests := []struct {
		name                          string
		cfg                           LossConfig
		in                            LossInputs
		loss                          float64
		grad                          []float64
		clipFrac, dualFrac, tisCapped float64
	}{
		{
			// Behavior = 0, so r = exp(logp). Tokens:
			//  1 A=+1 r=1.1: pg1=-1.1, pg2=-1.1 → -1.1, grad -1.1·.2
			//  2 A=+1 r=1.5: pg1=-1.5, pg2=-1.28 → -1.28 (clipped), grad 0
			//  3 A=-1 r=0.5: pg1=0.5, pg2=0.8 → 0.8 (clipped), grad 0
			//  4 A=-1 r=5:   pg1=5, pg2=1.28 → 5; dual 3 < 5 → 3, grad 0
			//  5 A=-1 r=2:   pg1=2, pg2=1.28 → 2; dual 3 > 2 → 2, grad 2·.2
			//  6 masked (ignored whatever its values)
			// loss = .2·(-1.1 - 1.28 + .8 + 3 + 2) = .684
			name: "ppo clip + dual clip",
			cfg:  clip,
			in: LossInputs{
				Logp:      []float64{ln(1.1), ln(1.5), ln(0.5), ln(5), ln(2), 7},
				Behavior:  []float64{0, 0, 0, 0, 0, 0},
				Advantage: []float64{1, 1, -1, -1, -1, 9},
				Weight:    []float64{.2, .2, .2, .2, .2, .2},
				Mask:      []float64{1, 1, 1, 1, 1, 0},
			},
			loss: .684, grad: []float64{-.22, 0, 0, 0, .4, 0}, clipFrac: 2. / 5, dualFrac: 1. / 5,
		},
		{
			name: "no dual clip",
			cfg:  LossConfig{ClipLow: 0.2, ClipHigh: 0.28},
			in: LossInputs{
				Logp: []float64{ln(5)}, Behavior: []float64{0}, Advantage: []float64{-1}, Weight: []float64{.5}, Mask: []float64{1},
			},
			loss: 2.5, grad: []float64{2.5},
		},
		{
			// Decoupled: ratio against OldLogp (= Logp here, r = 1, pg = -A),
			// ρ = min(exp(old − behavior), 2): 3 → 2 (capped), .5.
			// loss = 1·2·(-1) + 1·.5·(-1) = -2.5; grad = ρ·(−A·r).
			name: "truncated importance sampling",
			cfg:  LossConfig{ClipLow: 0.2, ClipHigh: 0.2, TISCap: 2},
			in: LossInputs{
				Logp: []float64{-1, -2}, OldLogp: []float64{-1, -2}, Behavior: []float64{-1 - ln(3), -2 - ln(.5)},
				Advantage: []float64{1, 1}, Weight: []float64{1, 1}, Mask: []float64{1, 1},
			},
			loss: -2.5, grad: []float64{-2, -.5}, tisCapped: .5,
		},
		{
			// A = 0 → pg = 0. logp = -1, ref = -1.5: k1 = .5 → loss .1·.5·2 = .1, grad .1·2.
			name: "kl k1",
			cfg:  LossConfig{ClipLow: .2, ClipHigh: .2, KLCoef: .1, KL: KLK1},
			in: LossInputs{Logp: []float64{-1}, Behavior: []float64{-1}, RefLogp: []float64{-1.5},
				Advantage: []float64{0}, Weight: []float64{2}, Mask: []float64{1}},
			loss: .1, grad: []float64{.2},
		},
		{
			// δ = ref − logp = −.5: k3 = e^−.5 + .5 − 1 = .10653066; grad β(1 − e^−.5) = .03934693.
			name: "kl k3",
			cfg:  LossConfig{ClipLow: .2, ClipHigh: .2, KLCoef: .1, KL: KLK3},
			in: LossInputs{Logp: []float64{-1}, Behavior: []float64{-1}, RefLogp: []float64{-1.5},
				Advantage: []float64{0}, Weight: []float64{1}, Mask: []float64{1}},
			loss: .1 * (math.Exp(-.5) - .5), grad: []float64{.1 * (1 - math.Exp(-.5))},
		},
		{
			// A = 1, r = 1: pg = -1; entropy bonus α·H = .01·2 → loss = -1 - .02.
			name: "entropy bonus",
			cfg:  LossConfig{ClipLow: .2, ClipHigh: .2, EntropyCoef: .01},
			in: LossInputs{Logp: []float64{-1}, Behavior: []float64{-1}, Entropy: []float64{2},
				Advantage: []float64{1}, Weight: []float64{1}, Mask: []float64{1}},
			loss: -1.02, grad: []float64{-1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			loss, st, err := PolicyLoss(tc.cfg, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !near(loss, tc.loss, 1e-9) {
				t.Errorf("loss %.12f want %.12f", loss, tc.loss)
			}
			for i := range tc.grad {
				if !near(st.Grad[i], tc.grad[i], 1e-9) {
					t.Errorf("grad[%d] %.12f want %.12f", i, st.Grad[i], tc.grad[i])
				}
			}
			if !near(st.ClipFrac, tc.clipFrac, 1e-12) || !near(st.DualClipFrac, tc.dualFrac, 1e-12) || !near(st.TISCapped, tc.tisCapped, 1e-12) {
				t.Errorf("clip %v dual %v tis %v; want %v %v %v", st.ClipFrac, st.DualClipFrac, st.TISCapped, tc.clipFrac, tc.dualFrac, tc.tisCapped)
			}
			if !near(st.PGLoss+st.KLLoss-st.EntropyLoss, loss, 1e-12) {
				t.Errorf("parts %v %v %v do not add to %v", st.PGLoss, st.KLLoss, st.EntropyLoss, loss)
			}
		})
	}
}

func TestPolicyLossErrors(t *testing.T) {
	ok := LossInputs{Logp: []float64{0}, Behavior: []float64{0}, Advantage: []float64{0}, Weight: []float64{0}, Mask: []float64{1}}
	bad := ok
	bad.Mask = nil
	if _, _, err := PolicyLoss(LossConfig{}, bad); err == nil {
		t.Error("length mismatch accepted")
	}
	if _, _, err := PolicyLoss(LossConfig{DualClip: 0.5}, ok); err == nil {
		t.Error("dual clip ≤ 1 accepted")
	}
	ok.RefLogp = []float64{0}
	if _, _, err := PolicyLoss(LossConfig{KLCoef: 1, KL: "k2x"}, ok); err == nil {
		t.Error("unknown KL estimator accepted")
	}
}

// Grad matches a central finite difference of the loss away from the clip
// kinks, for random inputs with every option on.
func TestPolicyLossGradientFiniteDifference(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	cfg := LossConfig{ClipLow: .2, ClipHigh: .28, DualClip: 3, TISCap: 2, KLCoef: .05, KL: KLK3}
	for iter := 0; iter < 200; iter++ {
		n := 1 + rng.IntN(12)
		in := LossInputs{}
		for i := 0; i < n; i++ {
			beh := -rng.Float64() * 4
			old := beh + rng.NormFloat64()*.3
			in.Behavior = append(in.Behavior, beh)
			in.OldLogp = append(in.OldLogp, old)
			in.Logp = append(in.Logp, old+rng.NormFloat64()*.5)
			in.RefLogp = append(in.RefLogp, old+rng.NormFloat64()*.3)
			in.Advantage = append(in.Advantage, rng.NormFloat64())
			in.Weight = append(in.Weight, rng.Float64())
			in.Mask = append(in.Mask, float64(rng.IntN(2)))
		}
		_, st, err := PolicyLoss(cfg, in)
		if err != nil {
			t.Fatal(err)
		}
		const h = 1e-6
		for i := 0; i < n; i++ {
			// Skip tokens within h of a kink (ratio at a clip boundary).
			r := math.Exp(in.Logp[i] - in.OldLogp[i])
			if math.Abs(r-0.8) < 1e-4 || math.Abs(r-1.28) < 1e-4 || math.Abs(r-3) < 1e-4 {
				continue
			}
			up, down := clone(in), clone(in)
			up.Logp[i] += h
			down.Logp[i] -= h
			lu, _, _ := PolicyLoss(cfg, up)
			ld, _, _ := PolicyLoss(cfg, down)
			fd := (lu - ld) / (2 * h)
			if !near(fd, st.Grad[i], 1e-5) {
				t.Fatalf("iter %d token %d: grad %v, finite difference %v", iter, i, st.Grad[i], fd)
			}
		}
	}
}

func clone(in LossInputs) LossInputs {
	c := in
	c.Logp = append([]float64(nil), in.Logp...)
	return c
}

// End to end: samples with rollout-mean weights, evaluated at logp = behavior
// (ratio 1, nothing clipped): the loss is −Σ_t w_t A_t = −(1/R) Σ_r A_r.
func TestLossInputsFor(t *testing.T) {
	ss := []Sample{mk("a", 0, 0, 1, 1), mk("a", 1, 0, 1), mk("b", 0, 0, 0, 1)}
	ss[0].Advantage, ss[1].Advantage, ss[2].Advantage = 1.5, 1.5, -0.5
	for i := range ss {
		for j := range ss[i].Logprobs {
			ss[i].Logprobs[j] = -float32(j + 1)
		}
	}
	if err := ApplyWeights(RolloutMean, ss); err != nil {
		t.Fatal(err)
	}
	var logp []float64
	for _, s := range ss {
		for _, lp := range s.Logprobs {
			logp = append(logp, float64(lp))
		}
	}
	in, err := LossInputsFor(ss, logp)
	if err != nil {
		t.Fatal(err)
	}
	loss, st, err := PolicyLoss(DefaultLossConfig(), in)
	if err != nil {
		t.Fatal(err)
	}
	if want := -(1.5 - 0.5) / 2; !near(loss, want, 1e-6) || st.Tokens != 4 || st.ClipFrac != 0 {
		t.Fatalf("loss %v (want %v), stats %+v", loss, want, st)
	}
	if _, err := LossInputsFor(ss, logp[1:]); err == nil {
		t.Error("short logp accepted")
	}
}
