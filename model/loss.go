package model

import (
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph DSL
)

// PolicyLossConfig holds the policy-gradient hyper-parameters; it mirrors
// samples.LossConfig (the reference implementation the graph loss matches).
type PolicyLossConfig struct {
	ClipLow, ClipHigh float64
	// DualClip is c of dual-clip PPO (> 1); 0 disables it.
	DualClip float64
	// TISCap is C of truncated importance sampling; 0 disables it. It only
	// acts when the batch has OldLogp.
	TISCap float64
	// KLCoef is β of the KL penalty against RefLogp; KLK1 selects the k1
	// estimator instead of k3.
	KLCoef float64
	KLK1   bool
	// EntropyCoef is α of the entropy bonus.
	EntropyCoef float64
	// LogRatioClamp bounds logπ − logπ_old before exp; 0 means 20.
	LogRatioClamp float64
}

// policyLossInputs are the per-token [B, T] inputs of the policy loss.
type policyLossInputs struct {
	logp, entropy                    *Node // from the model (carry gradients)
	behavior, old, ref, adv, w, mask *Node
	// Scalars (float32): see PolicyLossConfig; hasOld is 1 when old is the
	// trainer's recomputed log-probs (TIS active), 0 when old = behavior.
	clipLow, clipHigh, dual, tis, klCoef, klK3, entCoef, clamp, hasOld *Node
}

// policyLoss is the graph version of samples.PolicyLoss:
//
//	r   = exp(clamp(logp − old, −L, L))
//	pg  = max(−A·r, −A·clip(r, 1−ε_low, 1+ε_high));  if c > 0 and A < 0: pg = min(pg, −A·c)
//	ρ   = min(exp(old − behavior), C) if C > 0 and old given, else 1 (no gradient)
//	ℓ   = ρ·pg + β·kl − α·H
//	loss = Σ w·m·ℓ
//
// It returns the loss and [entropy mean, clip fraction, approx KL] over
// masked tokens.
func policyLoss(in policyLossInputs) (loss *Node, stats []*Node) {
	g := in.logp.Graph()
	dims := in.logp.Shape().Dimensions
	bc := func(s *Node) *Node { return BroadcastToDims(s, dims...) }
	one := ScalarOne(g, dtypes.Float32)
	A := in.adv
	lr := Min(Max(Sub(in.logp, in.old), bc(Neg(in.clamp))), bc(in.clamp))
	r := Exp(lr)
	pg1 := Neg(Mul(A, r))
	rc := Min(Max(r, bc(Sub(one, in.clipLow))), bc(Add(one, in.clipHigh)))
	pg2 := Neg(Mul(A, rc))
	pg := Max(pg1, pg2)
	zero := ZerosLike(A)
	dualOn := LogicalAnd(LessThan(A, zero), bc(GreaterThan(in.dual, ScalarZero(g, dtypes.Float32))))
	pg = Where(dualOn, Min(pg, Neg(Mul(A, bc(in.dual)))), pg)
	tisOn := bc(LogicalAnd(GreaterThan(in.tis, ScalarZero(g, dtypes.Float32)), GreaterThan(in.hasOld, ScalarZero(g, dtypes.Float32))))
	rho := Where(tisOn, Min(Exp(Sub(in.old, in.behavior)), bc(in.tis)), OnesLike(A))
	rho = StopGradient(rho)
	d := Sub(in.ref, in.logp)
	klK3 := Sub(Sub(Exp(d), d), OnesLike(d))
	kl := Where(bc(GreaterThan(in.klK3, ScalarZero(g, dtypes.Float32))), klK3, Neg(d))
	l := Add(Mul(rho, pg), Mul(bc(in.klCoef), kl))
	l = Sub(l, Mul(bc(in.entCoef), in.entropy))
	wm := Mul(in.w, in.mask)
	loss = ReduceAllSum(Mul(wm, l))
	n := Max(ReduceAllSum(in.mask), one)
	entMean := Div(ReduceAllSum(Mul(in.mask, in.entropy)), n)
	clipped := ConvertDType(GreaterThan(pg2, pg1), dtypes.Float32)
	clipFrac := Div(ReduceAllSum(Mul(in.mask, clipped)), n)
	approxKL := Div(ReduceAllSum(Mul(in.mask, Sub(in.old, in.logp))), n)
	return loss, []*Node{StopGradient(entMean), StopGradient(clipFrac), StopGradient(approxKL)}
}
