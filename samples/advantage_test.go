package samples

import (
	"math"
	"math/rand/v2"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestAdvantagesHandTable(t *testing.T) {
	const s3 = 0.5773502691896258 // sqrt(1/3)
	tests := []struct {
		name   string
		cfg    AdvantageConfig
		groups [][]float64
		want   [][]float64
		keep   []bool
		st     GroupStats
	}{
		// mean .5, sample std sqrt(4·.25/3) = 0.57735.
		{"grpo 1001", AdvantageConfig{Estimator: GRPO, Eps: 1e-9}, [][]float64{{1, 0, 0, 1}},
			[][]float64{{.5 / (s3 + 1e-9), -.5 / (s3 + 1e-9), -.5 / (s3 + 1e-9), .5 / (s3 + 1e-9)}}, []bool{true}, GroupStats{Groups: 1}},
		// mean 2, std sqrt(2/2) = 1, ε = 1e-6 default.
		{"grpo 123", AdvantageConfig{}, [][]float64{{1, 2, 3}},
			[][]float64{{-1 / (1 + 1e-6), 0, 1 / (1 + 1e-6)}}, []bool{true}, GroupStats{Groups: 1}},
		{"dr_grpo", AdvantageConfig{Estimator: DrGRPO}, [][]float64{{1, 2, 3}, {1, 0, 0, 1}},
			[][]float64{{-1, 0, 1}, {.5, -.5, -.5, .5}}, []bool{true, true}, GroupStats{Groups: 2}},
		// 1 − (2+3)/2 = −1.5; 2 − (1+3)/2 = 0; 3 − 1.5 = 1.5. 1 − 1/3 = .667.
		{"rloo", AdvantageConfig{Estimator: RLOO}, [][]float64{{1, 2, 3}, {1, 0, 0, 1}},
			[][]float64{{-1.5, 0, 1.5}, {2. / 3, -2. / 3, -2. / 3, 2. / 3}}, []bool{true, true}, GroupStats{Groups: 2}},
		// a = {-1,0,1}, {-.5,.5}; batch μ = 0, σ = sqrt(2.5/5) = .70711.
		{"reinforce++ baseline", AdvantageConfig{Estimator: ReinforcePPBaseline, Eps: 1e-12}, [][]float64{{1, 2, 3}, {0, 1}},
			[][]float64{{-math.Sqrt2, 0, math.Sqrt2}, {-math.Sqrt(.5), math.Sqrt(.5)}}, []bool{true, true}, GroupStats{Groups: 2}},
		// A zero-variance group in the batch adds zeros to the whitening:
		// a = {-1,1},{0,0}: μ = 0, σ = sqrt(2/4) → ±1.41421.
		{"reinforce++ with kept zero group", AdvantageConfig{Estimator: ReinforcePPBaseline, Eps: 1e-12}, [][]float64{{0, 2}, {5, 5}},
			[][]float64{{-math.Sqrt2, math.Sqrt2}, {0, 0}}, []bool{true, true}, GroupStats{Groups: 2, ZeroVariance: 1}},
		{"reinforce++ with dropped zero group", AdvantageConfig{Estimator: ReinforcePPBaseline, Eps: 1e-12, DropZeroVariance: true}, [][]float64{{0, 2}, {5, 5}},
			[][]float64{{-1, 1}, {0, 0}}, []bool{true, false}, GroupStats{Groups: 2, ZeroVariance: 1, Dropped: 1, DroppedRollouts: 2}},
		{"zero variance kept", AdvantageConfig{Estimator: GRPO}, [][]float64{{2, 2}, {7}, {0, 1}},
			[][]float64{{0, 0}, {0}, {-1 / (math.Sqrt(.5) + 1e-6) * .5, .5 / (math.Sqrt(.5) + 1e-6)}}, []bool{true, true, true},
			GroupStats{Groups: 3, ZeroVariance: 2, SingletonRollouts: 1}},
		{"zero variance dropped", AdvantageConfig{Estimator: RLOO, DropZeroVariance: true}, [][]float64{{2, 2}, {7}, {0, 1}},
			[][]float64{{0, 0}, {0}, {-1, 1}}, []bool{false, false, true},
			GroupStats{Groups: 3, ZeroVariance: 2, Dropped: 2, DroppedRollouts: 3, SingletonRollouts: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			adv, keep, st, err := Advantages(tc.cfg, tc.groups)
			if err != nil {
				t.Fatal(err)
			}
			if st != tc.st {
				t.Errorf("stats %+v want %+v", st, tc.st)
			}
			for g := range tc.want {
				if keep[g] != tc.keep[g] {
					t.Errorf("group %d keep %v want %v", g, keep[g], tc.keep[g])
				}
				for i := range tc.want[g] {
					if !near(adv[g][i], tc.want[g][i], 1e-9) {
						t.Errorf("group %d rollout %d: %.12f want %.12f", g, i, adv[g][i], tc.want[g][i])
					}
				}
			}
		})
	}
	if _, _, _, err := Advantages(AdvantageConfig{Estimator: "ppo"}, nil); err == nil {
		t.Error("unknown estimator accepted")
	}
}

// GRPO, Dr.GRPO and RLOO advantages of every group have mean 0; GRPO's have
// sample variance 1 (up to ε); REINFORCE++-baseline's batch has mean 0 and
// population variance 1.
func TestPropertyAdvantageMoments(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for iter := 0; iter < 200; iter++ {
		groups := make([][]float64, 1+rng.IntN(6))
		for g := range groups {
			groups[g] = make([]float64, 2+rng.IntN(7))
			for i := range groups[g] {
				groups[g][i] = math.Round(rng.NormFloat64()*4) / 2
			}
		}
		for _, est := range []Estimator{GRPO, DrGRPO, RLOO} {
			adv, _, _, err := Advantages(AdvantageConfig{Estimator: est, Eps: 1e-12}, groups)
			if err != nil {
				t.Fatal(err)
			}
			for g, a := range adv {
				var s, ss float64
				for _, x := range a {
					s += x
					ss += x * x
				}
				if !near(s/float64(len(a)), 0, 1e-9) {
					t.Fatalf("%s group %v: mean %v", est, groups[g], s/float64(len(a)))
				}
				if est == GRPO && ss != 0 && !near(ss/float64(len(a)-1), 1, 1e-6) {
					t.Fatalf("grpo group %v: variance %v", groups[g], ss/float64(len(a)-1))
				}
			}
		}
		adv, _, _, _ := Advantages(AdvantageConfig{Estimator: ReinforcePPBaseline, Eps: 1e-12}, groups)
		var s, ss, n float64
		for _, a := range adv {
			for _, x := range a {
				s, ss, n = s+x, ss+x*x, n+1
			}
		}
		if !near(s/n, 0, 1e-9) || (ss != 0 && !near(ss/n, 1, 1e-6)) {
			t.Fatalf("reinforce++ batch mean %v var %v", s/n, ss/n)
		}
	}
}
