package samples

import (
	"fmt"
	"math"
)

// KLEstimator names the per-token estimator of KL(π_θ ‖ π_ref) used as a loss
// penalty. With δ_t = logπ_ref(t) − logπ_θ(t):
//
//	k1: kl_t = −δ_t = logπ_θ − logπ_ref            (unbiased, can be negative)
//	k3: kl_t = exp(δ_t) − δ_t − 1                  (unbiased, always ≥ 0; Schulman's k3, verl "low_var_kl" without its clamp)
//
// Their derivatives with respect to logπ_θ are 1 (k1) and 1 − exp(δ_t) (k3).
type KLEstimator string

const (
	KLK1 KLEstimator = "k1"
	KLK3 KLEstimator = "k3"
)

// LossConfig holds the policy-loss hyper-parameters.
type LossConfig struct {
	// ClipLow, ClipHigh are ε_low, ε_high: the ratio is clipped to
	// [1 − ε_low, 1 + ε_high] (e.g. 0.2, 0.28 for clip-higher).
	ClipLow, ClipHigh float64
	// DualClip is c of dual-clip PPO (> 1, e.g. 3); 0 disables it.
	DualClip float64
	// TISCap is C of truncated importance sampling; 0 disables it. It only
	// acts when LossInputs.OldLogp is given (see PolicyLoss).
	TISCap float64
	// KLCoef is β of the KL penalty (0: off; RefLogp must then be nil or
	// is ignored); KL picks the estimator ("" means k3).
	KLCoef float64
	KL     KLEstimator
	// EntropyCoef is α of the entropy bonus (0: off).
	EntropyCoef float64
	// LogRatioClamp bounds logπ_θ − logπ_old before exponentiation, for
	// numerical safety (verl uses 20); 0 means 20.
	LogRatioClamp float64
}

// LossInputs are per-token slices of equal length n: all tokens of a batch
// flattened, or one sample's tokens. Optional slices may be nil.
type LossInputs struct {
	// Logp[t] = logπ_θ(t): the policy being optimized (carries the gradient).
	Logp []float64
	// Behavior[t] = logμ(t): the rollout log-probs (Sample.Logprobs), the
	// policy that actually generated the token, possibly stale.
	Behavior []float64
	// OldLogp[t] = logπ_old(t), optional: the trainer's own log-probs at
	// the start of the step (recomputed). nil means π_old = μ.
	OldLogp []float64
	// RefLogp[t] = logπ_ref(t), optional: the reference model (KL penalty).
	RefLogp []float64
	// Advantage[t] = A_t (Sample.TokenAdvantages).
	Advantage []float64
	// Weight[t] = w_t (Sample.Weights): the aggregation weight.
	Weight []float64
	// Mask[t] = m_t ∈ {0,1} (Sample.LossMask). Tokens with m_t = 0
	// contribute nothing whatever their weight.
	Mask []float64
	// Entropy[t] = H_t, optional: the policy's entropy at position t.
	Entropy []float64
}

// LossStats summarises a PolicyLoss evaluation. Fractions and means are over
// tokens with m_t = 1 (unweighted), 0 when there are none.
type LossStats struct {
	Tokens int
	// ClipFrac: fraction of tokens where the clipped term was the larger
	// (−A·clip(r) > −A·r), i.e. the gradient was cut by the PPO clip.
	ClipFrac float64
	// DualClipFrac: fraction of tokens with A < 0 where the dual clip −A·c
	// was the smaller (and so the one used).
	DualClipFrac float64
	// ApproxKL: mean of logπ_old − logπ_θ (verl's ppo_kl).
	ApproxKL float64
	// RatioMean: mean of r_t.
	RatioMean float64
	// TISMean: mean importance weight ρ_t; TISCapped: fraction capped.
	TISMean, TISCapped float64
	// KLMean: mean of kl_t (0 when off); EntropyMean: mean of H_t.
	KLMean, EntropyMean float64
	// PGLoss, KLLoss, EntropyLoss: the weighted sums Σ w_t m_t ρ_t·pg_t,
	// Σ w_t m_t β·kl_t and Σ w_t m_t α·H_t; loss = PGLoss + KLLoss − EntropyLoss.
	PGLoss, KLLoss, EntropyLoss float64
	// Grad[t] = ∂loss/∂Logp[t] holding Behavior, OldLogp, RefLogp, the
	// advantages and weights constant, and ignoring the entropy term (whose
	// gradient flows through the logits, not through logπ_θ(t)).
	Grad []float64
}

// PolicyLoss is the reference policy loss that every agl trainer backend
// must reproduce. Per token t (all quantities above), with π_old = OldLogp
// when given and μ (Behavior) otherwise:
//
//	r_t   = exp(clamp(logπ_θ − logπ_old, −L, L))            ratio (L = LogRatioClamp)
//	pg1_t = −A_t · r_t
//	pg2_t = −A_t · clip(r_t, 1 − ε_low, 1 + ε_high)
//	pg_t  = max(pg1_t, pg2_t)                                 PPO clip
//	if c > 0 and A_t < 0:  pg_t = min(pg_t, −A_t · c)         dual clip
//	ρ_t   = min(exp(logπ_old − logμ), C)   if C > 0 and OldLogp given, else 1   (TIS, constant)
//	ℓ_t   = ρ_t · pg_t + β · kl_t − α · H_t                   kl_t per KLEstimator (0 when β = 0)
//	loss  = Σ_t w_t · m_t · ℓ_t
//
// With OldLogp nil the behavior policy is the proximal policy: the ratio is
// taken against the rollout log-probs, so stale tokens (produced by older
// versions) are corrected by the ratio and bounded by the clip. With OldLogp
// given (decoupled PPO), the ratio is taken against the trainer's own
// recomputed log-probs and the staleness between μ and π_old is corrected by
// the truncated importance weight ρ_t, treated as a constant.
//
// The gradient Grad[t] = ∂loss/∂logπ_θ(t) is
//
//	w_t m_t [ ρ_t · (−A_t r_t) · 1{pg1 branch used} + β · ∂kl_t/∂logπ_θ ]
//
// where the pg1 branch is used when pg1_t ≥ pg2_t and, for dual clip with
// A_t < 0, also pg1_t ≤ −A_t·c (the clamp L also zeroes the pg1 gradient when
// it binds). Lengths must match or an error is returned.
func PolicyLoss(cfg LossConfig, in LossInputs) (float64, LossStats, error) {
	n := len(in.Logp)
	for name, s := range map[string][]float64{"behavior": in.Behavior, "advantage": in.Advantage, "weight": in.Weight, "mask": in.Mask} {
		if len(s) != n {
			return 0, LossStats{}, fmt.Errorf("samples: policy loss: %s has %d values, logp %d", name, len(s), n)
		}
	}
	for name, s := range map[string][]float64{"old_logp": in.OldLogp, "ref_logp": in.RefLogp, "entropy": in.Entropy} {
		if s != nil && len(s) != n {
			return 0, LossStats{}, fmt.Errorf("samples: policy loss: %s has %d values, logp %d", name, len(s), n)
		}
	}
	if cfg.DualClip != 0 && cfg.DualClip <= 1 {
		return 0, LossStats{}, fmt.Errorf("samples: policy loss: dual clip c = %v must exceed 1", cfg.DualClip)
	}
	useKL := cfg.KLCoef != 0 && in.RefLogp != nil
	klEst := cfg.KL
	if klEst == "" {
		klEst = KLK3
	}
	if useKL && klEst != KLK1 && klEst != KLK3 {
		return 0, LossStats{}, fmt.Errorf("samples: policy loss: unknown KL estimator %q", cfg.KL)
	}
	L := cfg.LogRatioClamp
	if L == 0 {
		L = 20
	}
	st := LossStats{Grad: make([]float64, n)}
	var loss float64
	var clipN, dualN, tisCapN float64
	for t := 0; t < n; t++ {
		if in.Mask[t] == 0 {
			continue
		}
		st.Tokens++
		w := in.Weight[t] * in.Mask[t]
		old := in.Behavior[t]
		if in.OldLogp != nil {
			old = in.OldLogp[t]
		}
		A := in.Advantage[t]
		lr := in.Logp[t] - old
		clamped := false
		if lr > L {
			lr, clamped = L, true
		} else if lr < -L {
			lr, clamped = -L, true
		}
		r := math.Exp(lr)
		pg1 := -A * r
		pg2 := -A * math.Max(1-cfg.ClipLow, math.Min(r, 1+cfg.ClipHigh))
		pg := pg1
		pg1Used := !clamped
		if pg2 > pg1 {
			pg = pg2
			pg1Used = false
			clipN++
		}
		if cfg.DualClip > 0 && A < 0 {
			if pg3 := -A * cfg.DualClip; pg3 < pg {
				pg = pg3
				pg1Used = false
				dualN++
			}
		}
		rho := 1.0
		if cfg.TISCap > 0 && in.OldLogp != nil {
			rho = math.Exp(in.OldLogp[t] - in.Behavior[t])
			if rho > cfg.TISCap {
				rho = cfg.TISCap
				tisCapN++
			}
		}
		var kl, dkl float64
		if useKL {
			d := in.RefLogp[t] - in.Logp[t]
			if klEst == KLK1 {
				kl, dkl = -d, 1
			} else {
				e := math.Exp(d)
				kl, dkl = e-d-1, 1-e
			}
		}
		var h float64
		if in.Entropy != nil {
			h = in.Entropy[t]
		}
		st.PGLoss += w * rho * pg
		if useKL {
			st.KLLoss += w * cfg.KLCoef * kl
		}
		st.EntropyLoss += w * cfg.EntropyCoef * h
		g := 0.0
		if pg1Used {
			g = rho * (-A * r)
		}
		if useKL {
			g += cfg.KLCoef * dkl
		}
		st.Grad[t] = w * g
		st.ApproxKL += old - in.Logp[t]
		st.RatioMean += r
		st.TISMean += rho
		st.KLMean += kl
		st.EntropyMean += h
	}
	loss = st.PGLoss + st.KLLoss - st.EntropyLoss
	if k := float64(st.Tokens); k > 0 {
		st.ClipFrac = clipN / k
		st.DualClipFrac = dualN / k
		st.TISCapped = tisCapN / k
		st.ApproxKL /= k
		st.RatioMean /= k
		st.TISMean /= k
		st.KLMean /= k
		st.EntropyMean /= k
	}
	return loss, st, nil
}

// DefaultLossConfig is plain PPO-clip with ε = 0.2 on both sides and nothing
// else (no dual clip, TIS, KL or entropy). A zero LossConfig clips the ratio
// to exactly 1; start from this instead.
func DefaultLossConfig() LossConfig { return LossConfig{ClipLow: 0.2, ClipHigh: 0.2} }

// LossInputsFor flattens samples into LossInputs, sample after sample, token
// after token: Behavior from Logprobs, Advantage from TokenAdvantages,
// Weight from Weights (0 when nil), Mask from LossMask. logp must hold the
// policy's log-probs in the same flattened order (its value at masked
// positions is ignored); the optional slices are left nil.
func LossInputsFor(ss []Sample, logp []float64) (LossInputs, error) {
	n := 0
	for i := range ss {
		n += len(ss[i].IDs)
	}
	if len(logp) != n {
		return LossInputs{}, fmt.Errorf("samples: %d log-probs for %d tokens", len(logp), n)
	}
	in := LossInputs{Logp: logp, Behavior: make([]float64, 0, n), Advantage: make([]float64, 0, n),
		Weight: make([]float64, 0, n), Mask: make([]float64, 0, n)}
	for i := range ss {
		s := &ss[i]
		for t := range s.IDs {
			m := float64(s.LossMask[t])
			in.Mask = append(in.Mask, m)
			in.Behavior = append(in.Behavior, float64(s.Logprobs[t]))
			in.Advantage = append(in.Advantage, m*s.Advantage)
			w := 0.0
			if t < len(s.Weights) {
				w = float64(s.Weights[t])
			}
			in.Weight = append(in.Weight, w)
		}
	}
	return in, nil
}
