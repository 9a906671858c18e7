package samples

import (
	"fmt"
	"math"
)

// Estimator names an advantage estimator. Every estimator works on one
// scalar reward R_i per rollout i of a group of n rollouts (same task, same
// step) and yields one scalar advantage A_i per rollout, broadcast to every
// trained token of every sample of that rollout.
type Estimator string

const (
	// GRPO (also the meaning of ""): A_i = (R_i − mean) / (std + ε), with mean = Σ_j R_j / n and std
	// the sample standard deviation sqrt(Σ_j (R_j − mean)² / (n − 1))
	// (Bessel-corrected, like torch.std in verl's GRPO).
	GRPO Estimator = "grpo"
	// DrGRPO: A_i = R_i − mean (no division by std; Dr. GRPO).
	DrGRPO Estimator = "dr_grpo"
	// RLOO: A_i = R_i − (Σ_{j≠i} R_j)/(n − 1) = n/(n−1)·(R_i − mean).
	RLOO Estimator = "rloo"
	// ReinforcePPBaseline (REINFORCE++-baseline, arXiv:2501.03262):
	// first a_i = R_i − mean of the group, then every a_i of the whole batch
	// (all groups passed to Advantages together, each rollout counted once)
	// is whitened: A_i = (a_i − μ_B) / (σ_B + ε), with μ_B the batch mean
	// of the a_i and σ_B their population standard deviation
	// sqrt(Σ (a_i − μ_B)² / N).
	//
	// Difference from verl's compute_reinforce_plus_plus_baseline_outcome_advantage:
	// verl whitens over response tokens (masked_whiten: each rollout weighs
	// by its response length, Bessel-corrected variance, ε = 1e-8 inside
	// the square root). agl has one advantage per rollout whatever its
	// token count — the same reason rollout-mean aggregation exists — so
	// it whitens over rollouts.
	ReinforcePPBaseline Estimator = "reinforce_pp_baseline"
)

// AdvantageConfig controls advantage estimation.
type AdvantageConfig struct {
	Estimator Estimator
	// Eps is ε in the GRPO and REINFORCE++-baseline denominators; 0 means 1e-6.
	Eps float64
	// DropZeroVariance drops groups whose rewards are all equal (and groups
	// of one rollout): every advantage would be 0, they only cost compute.
	// Off: they are kept with advantage 0.
	DropZeroVariance bool
}

// GroupStats reports what advantage estimation did.
type GroupStats struct {
	Groups            int `json:"groups"`
	ZeroVariance      int `json:"zero_variance_groups"`
	Dropped           int `json:"dropped_groups"`
	DroppedRollouts   int `json:"dropped_rollouts"`
	SingletonRollouts int `json:"singleton_groups"`
}

// Advantages computes one advantage per rollout. groups[g] lists the rewards
// of group g's rollouts; the result has the same shape. A group is
// zero-variance when all its rewards are equal or it has one rollout: its
// advantages are 0 under every estimator (for REINFORCE++-baseline they
// still take part in the batch whitening with a_i = 0, unless dropped), and
// keep[g] is false when cfg.DropZeroVariance.
//
// The arithmetic is overflow-safe for any finite rewards: when a group's
// rewards (the batch's, for REINFORCE++-baseline) exceed 2^500 in
// magnitude, they are divided by a power of two (exactly) before summing,
// so no mean, sum of squares or difference overflows; GRPO and
// REINFORCE++-baseline are scale-free (ε is scaled along), and the
// unnormalised Dr.GRPO and RLOO advantages are scaled back, saturating at
// ±math.MaxFloat64 where the true value is not representable. Below 2^500
// the plain formula is computed as written. A reward that is not finite
// is an error.
func Advantages(cfg AdvantageConfig, groups [][]float64) (adv [][]float64, keep []bool, st GroupStats, err error) {
	eps := cfg.Eps
	if eps == 0 {
		eps = 1e-6
	}
	switch cfg.Estimator {
	case GRPO, DrGRPO, RLOO, ReinforcePPBaseline, "":
	default:
		return nil, nil, st, fmt.Errorf("samples: unknown advantage estimator %q", cfg.Estimator)
	}
	for g, rs := range groups {
		for i, r := range rs {
			if math.IsNaN(r) || math.IsInf(r, 0) {
				return nil, nil, st, fmt.Errorf("samples: group %d rollout %d: reward %v is not finite", g, i, r)
			}
		}
	}
	// lg[g] is log2 of group g's scale (REINFORCE++-baseline rescales
	// its groups to one batch scale before whitening).
	lg := make([]int, len(groups))
	adv = make([][]float64, len(groups))
	keep = make([]bool, len(groups))
	st.Groups = len(groups)
	for g, rs := range groups {
		n := len(rs)
		keep[g] = true
		a := make([]float64, n)
		adv[g] = a
		if n == 0 {
			continue
		}
		zero := n == 1
		if n == 1 {
			st.SingletonRollouts++
		}
		if !zero {
			zero = true
			for _, r := range rs[1:] {
				if r != rs[0] {
					zero = false
					break
				}
			}
		}
		if zero {
			st.ZeroVariance++
			if cfg.DropZeroVariance {
				keep[g] = false
				st.Dropped++
				st.DroppedRollouts += n
			}
			continue // advantages stay 0
		}
		// REINFORCE++-baseline scales by the whole batch: its whitening
		// mixes groups.
		sc := scaleFor(rs)
		_, lg[g] = math.Frexp(sc)
		lg[g]--
		// inv is a power of two: r*inv is the exact r/sc, and faster.
		inv := 1 / sc
		mean := 0.0
		for _, r := range rs {
			mean += r * inv
		}
		mean /= float64(n)
		switch cfg.Estimator {
		case GRPO, "":
			ss := 0.0
			for _, r := range rs {
				ss += (r*inv - mean) * (r*inv - mean)
			}
			std := math.Sqrt(ss / float64(n-1))
			for i, r := range rs {
				a[i] = (r*inv - mean) / (std + eps*inv)
			}
		case DrGRPO:
			for i, r := range rs {
				a[i] = saturate((r*inv - mean) * sc)
			}
		case ReinforcePPBaseline:
			for i, r := range rs {
				a[i] = r*inv - mean // times sc: rescaled and whitened below
			}
		case RLOO:
			sum := mean * float64(n)
			for i, r := range rs {
				a[i] = saturate((r*inv - (sum-r*inv)/float64(n-1)) * sc)
			}
		}
	}
	if cfg.Estimator == ReinforcePPBaseline {
		// Bring every a_i to one scale 2^k, k the batch's largest binary
		// order of a_i (0, the plain formula, while no group was scaled):
		// whitening is scale-free with ε scaled along.
		k, scaled := math.MinInt, false
		for g := range adv {
			scaled = scaled || (keep[g] && lg[g] != 0)
		}
		for g, a := range adv {
			if !keep[g] || !scaled {
				continue
			}
			for _, x := range a {
				if x != 0 {
					_, e := math.Frexp(x)
					k = max(k, e+lg[g]-1)
				}
			}
		}
		if !scaled || k == math.MinInt {
			k = 0
		}
		if scaled {
			for g, a := range adv {
				for i := range a {
					a[i] = math.Ldexp(a[i], lg[g]-k)
				}
			}
		}
		var sum, cnt float64
		for g, a := range adv {
			if !keep[g] {
				continue
			}
			for _, x := range a {
				sum += x
				cnt++
			}
		}
		if cnt > 0 {
			mu := sum / cnt
			ss := 0.0
			for g, a := range adv {
				if !keep[g] {
					continue
				}
				for _, x := range a {
					ss += (x - mu) * (x - mu)
				}
			}
			sigma := math.Sqrt(ss / cnt)
			epsSc := math.Ldexp(eps, -k)
			for g, a := range adv {
				if !keep[g] {
					continue
				}
				for i := range a {
					a[i] = (a[i] - mu) / (sigma + epsSc)
				}
			}
		}
	}
	return adv, keep, st, nil
}

// scaleFor returns 1 when every reward is at most 2^500 in magnitude (no
// sum of squares of differences of n < 2^20 such rewards can overflow),
// else the power of two at or just below half the largest magnitude's
// binary order (2^(e-1) for m = f·2^e, f in [0.5, 1): representable even for
// math.MaxFloat64), by which the rewards are divided exactly into [-2, 2].
func scaleFor(groups ...[]float64) float64 {
	m := 0.0
	for _, rs := range groups {
		for _, r := range rs {
			m = max(m, math.Abs(r))
		}
	}
	if m <= 0x1p500 {
		return 1
	}
	_, e := math.Frexp(m)
	return math.Ldexp(1, e-1)
}

// saturate maps an overflowed ±Inf to ±math.MaxFloat64.
func saturate(x float64) float64 {
	switch {
	case math.IsInf(x, 1):
		return math.MaxFloat64
	case math.IsInf(x, -1):
		return -math.MaxFloat64
	}
	return x
}
