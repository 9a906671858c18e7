package samples

import (
	"fmt"
	"math"
)

// DistillMode says how the on-policy distillation advantage combines with
// the RL advantage of a sample's tokens.
type DistillMode string

const (
	// DistillReplace trains on the distillation advantage alone: the RL
	// advantage is cleared (no reward is needed).
	DistillReplace DistillMode = "replace"
	// DistillAdd adds the distillation advantage to the RL advantage.
	DistillAdd DistillMode = "add"
)

// DistillStats summarises one Distill call over the trained tokens.
type DistillStats struct {
	// Tokens is the number of trained tokens scored; ReverseKL the mean over
	// them of log μ(t) − log π_teacher(t), the sampled (k1) estimate of
	// KL(student ‖ teacher) per token.
	Tokens    int
	ReverseKL float64
}

// Distill sets the on-policy distillation advantage of every trained token
// of ss (Sample.DistillAdvantages) from teacher[i][t], the teacher's
// log-prob of ss[i].IDs[t] given ss[i].IDs[:t]:
//
//	A_t = −coef · (log μ(t) − log π_teacher(t))
//
// with μ the sampling log-prob the gateway recorded (Sample.Logprobs): the
// per-token reverse KL of the student's own samples, as a reward to
// maximise (Thinking Machines' on-policy distillation; slime's OPD adds the
// same term to the estimator's advantage). Masked tokens get 0. With
// DistillReplace the RL advantage (Advantage, CallAdvantages) is cleared,
// so the token's advantage is A_t alone; with DistillAdd TokenAdvantages
// adds A_t to it. A teacher row of the wrong length or a non-finite
// teacher log-prob on a trained token is an error, and ss is left as it
// was.
func Distill(ss []Sample, teacher [][]float32, coef float64, mode DistillMode) (DistillStats, error) {
	var st DistillStats
	if mode != DistillReplace && mode != DistillAdd {
		return st, fmt.Errorf("samples: distill mode %q: want %s or %s", mode, DistillReplace, DistillAdd)
	}
	if !(coef > 0) || math.IsInf(coef, 0) {
		return st, fmt.Errorf("samples: distill coef %v: want a finite value > 0", coef)
	}
	if len(teacher) != len(ss) {
		return st, fmt.Errorf("samples: distill: %d teacher rows for %d samples", len(teacher), len(ss))
	}
	for i := range ss {
		s := &ss[i]
		if len(teacher[i]) != len(s.IDs) {
			return st, fmt.Errorf("samples: distill: sample %s/%d has %d tokens, the teacher scored %d", s.RolloutID, s.Index, len(s.IDs), len(teacher[i]))
		}
		for t, m := range s.LossMask {
			if lp := float64(teacher[i][t]); m != 0 && (math.IsNaN(lp) || math.IsInf(lp, 0) || lp > 1e-3) {
				return st, fmt.Errorf("samples: distill: sample %s/%d token %d (id %d): teacher log-prob %v is not a log-probability", s.RolloutID, s.Index, t, s.IDs[t], lp)
			}
		}
	}
	var sum float64
	for i := range ss {
		s := &ss[i]
		s.DistillAdvantages = make([]float64, len(s.IDs))
		for t, m := range s.LossMask {
			if m == 0 {
				continue
			}
			kl := float64(s.Logprobs[t]) - float64(teacher[i][t])
			s.DistillAdvantages[t] = -coef * kl
			sum += kl
			st.Tokens++
		}
		if mode == DistillReplace {
			s.Advantage, s.CallAdvantages = 0, nil
		}
	}
	if st.Tokens > 0 {
		st.ReverseKL = sum / float64(st.Tokens)
	}
	return st, nil
}
