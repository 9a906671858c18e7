package samples

import "fmt"

// Aggregation names how per-token losses are combined into the step's loss.
// Every mode is expressed as a per-token weight w_t (0 where the loss mask
// is 0), so that every trainer backend — embedded or remote, one batch or
// many micro-batches — computes the same number:
//
//	loss = Σ_t w_t · ℓ_t   (summed over every token of every sample of the step)
//
// Notation, over the set of samples passed to ApplyWeights (one optimizer
// step): m_t the loss mask, T_s = Σ_{t∈s} m_t the trained tokens of sample s,
// T_r = Σ_{s∈r} T_s those of rollout r, T = Σ_s T_s, S the number of samples
// with T_s > 0, R the number of rollouts with T_r > 0. Samples and rollouts
// with no trained token get weight 0 and are not counted.
type Aggregation string

const (
	// TokenMean: w_t = m_t / T. Every trained token of the step weighs the
	// same; long rollouts dominate.
	TokenMean Aggregation = "token-mean"
	// SeqMeanTokenMean: w_t = m_t / (T_s · S). Mean over tokens within a
	// sample, then mean over samples.
	SeqMeanTokenMean Aggregation = "seq-mean-token-mean"
	// SeqMeanTokenSum: w_t = m_t / S. Sum over tokens within a sample,
	// mean over samples.
	SeqMeanTokenSum Aggregation = "seq-mean-token-sum"
	// RolloutMean: w_t = m_t / (T_r · R). Mean over all trained tokens of a
	// rollout (across its samples), then mean over rollouts: before the
	// division by R (the batch normalization) each rollout's weights sum to
	// exactly 1 whatever its number of samples and tokens; after it, to 1/R,
	// and the whole step's weights sum to 1.
	RolloutMean Aggregation = "rollout-mean"
)

// ApplyWeights sets Weights on every sample according to mode (see
// Aggregation for the exact formulas). Rollouts are identified by RolloutID.
func ApplyWeights(mode Aggregation, ss []Sample) error {
	switch mode {
	case TokenMean, SeqMeanTokenMean, SeqMeanTokenSum, RolloutMean:
	default:
		return fmt.Errorf("samples: unknown loss aggregation %q", mode)
	}
	var total, nSeq float64
	perRollout := map[string]float64{}
	for i := range ss {
		t := float64(ss[i].Trained())
		total += t
		if t > 0 {
			nSeq++
		}
		perRollout[ss[i].RolloutID] += t
	}
	nRoll := 0.0
	for _, t := range perRollout {
		if t > 0 {
			nRoll++
		}
	}
	for i := range ss {
		s := &ss[i]
		var w float64
		switch mode {
		case TokenMean:
			w = 1 / total
		case SeqMeanTokenMean:
			w = 1 / (float64(s.Trained()) * nSeq)
		case SeqMeanTokenSum:
			w = 1 / nSeq
		case RolloutMean:
			w = 1 / (perRollout[s.RolloutID] * nRoll)
		}
		if cap(s.Weights) >= len(s.IDs) {
			s.Weights = s.Weights[:len(s.IDs)]
		} else {
			s.Weights = make([]float32, len(s.IDs))
		}
		for t, m := range s.LossMask {
			if m != 0 {
				s.Weights[t] = float32(w)
			} else {
				s.Weights[t] = 0
			}
		}
	}
	return nil
}
