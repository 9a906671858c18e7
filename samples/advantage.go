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
		mean := 0.0
		for _, r := range rs {
			mean += r
		}
		mean /= float64(n)
		switch cfg.Estimator {
		case GRPO, "":
			ss := 0.0
			for _, r := range rs {
				ss += (r - mean) * (r - mean)
			}
			std := math.Sqrt(ss / float64(n-1))
			for i, r := range rs {
				a[i] = (r - mean) / (std + eps)
			}
		case DrGRPO, ReinforcePPBaseline:
			for i, r := range rs {
				a[i] = r - mean
			}
		case RLOO:
			sum := mean * float64(n)
			for i, r := range rs {
				a[i] = r - (sum-r)/float64(n-1)
			}
		}
	}
	if cfg.Estimator == ReinforcePPBaseline {
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
			for g, a := range adv {
				if !keep[g] {
					continue
				}
				for i := range a {
					a[i] = (a[i] - mu) / (sigma + eps)
				}
			}
		}
	}
	return adv, keep, st, nil
}
