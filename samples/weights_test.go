package samples

import (
	"testing"
)

// mk makes a sample of rollout r whose loss mask is mask.
func mk(r string, idx int, mask ...uint8) Sample {
	return Sample{RolloutID: r, Index: idx, IDs: make([]int32, len(mask)), LossMask: mask, Logprobs: make([]float32, len(mask))}
}

// Three samples: rollout a = s1 (2 trained of 4) + s2 (1 trained of 2),
// rollout b = s3 (4 trained of 5), s4 (0 trained, not counted).
// T = 7, S = 3, R = 2, T_a = 3, T_b = 4.
func TestWeightsHandTable(t *testing.T) {
	batch := func() []Sample {
		return []Sample{mk("a", 0, 0, 1, 0, 1), mk("a", 1, 0, 1), mk("b", 0, 0, 1, 1, 1, 1), mk("c", 0, 0, 0)}
	}
	tests := []struct {
		mode Aggregation
		want [4]float64 // the weight of a trained token of s1..s4
	}{
		{TokenMean, [4]float64{1. / 7, 1. / 7, 1. / 7, 0}},
		{SeqMeanTokenMean, [4]float64{1. / (2 * 3), 1. / (1 * 3), 1. / (4 * 3), 0}},
		{SeqMeanTokenSum, [4]float64{1. / 3, 1. / 3, 1. / 3, 0}},
		{RolloutMean, [4]float64{1. / (3 * 2), 1. / (3 * 2), 1. / (4 * 2), 0}},
	}
	for _, tc := range tests {
		t.Run(string(tc.mode), func(t *testing.T) {
			ss := batch()
			if err := ApplyWeights(tc.mode, ss); err != nil {
				t.Fatal(err)
			}
			total := 0.0
			for i, s := range ss {
				if len(s.Weights) != len(s.IDs) {
					t.Fatalf("sample %d: %d weights for %d ids", i, len(s.Weights), len(s.IDs))
				}
				for j, w := range s.Weights {
					want := 0.0
					if s.LossMask[j] == 1 {
						want = tc.want[i]
					}
					if !near(float64(w), want, 1e-7) {
						t.Errorf("sample %d token %d: weight %v want %v", i, j, w, want)
					}
					total += float64(w)
				}
			}
			// token-mean, seq-mean-token-mean and rollout-mean sum to 1
			// over the step; seq-mean-token-sum sums to T/S.
			wantTotal := 1.0
			if tc.mode == SeqMeanTokenSum {
				wantTotal = 7. / 3
			}
			if !near(total, wantTotal, 1e-6) {
				t.Errorf("total weight %v want %v", total, wantTotal)
			}
		})
	}
	if err := ApplyWeights("mean", batch()); err == nil {
		t.Error("unknown mode accepted")
	}
}
