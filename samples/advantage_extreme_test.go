package samples

import (
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// extremeReward draws rewards that overflow naive sums: the largest finite
// values, 1.7e308, 1e300, subnormals, zeros and ordinary values.
func extremeReward(rng *rand.Rand) float64 {
	v := []float64{math.MaxFloat64, 1.7e308, 1e308, 1e300, 0x1p501, 1, 0.5, 0, 5e-324, 1e-310}[rng.IntN(10)]
	if rng.IntN(2) == 0 {
		v = -v
	}
	if rng.IntN(4) == 0 {
		v *= rng.Float64()
	}
	return v
}

// refAdvantages evaluates each estimator's formula (as documented on the
// Estimator constants) in 512-bit floating point, with the same
// zero-variance rule, and rounds the result to float64, saturating at
// ±math.MaxFloat64.
func refAdvantages(est Estimator, eps float64, groups [][]float64) [][]float64 {
	const prec = 512
	nf := func(x float64) *big.Float { return new(big.Float).SetPrec(prec).SetFloat64(x) }
	out := make([][]float64, len(groups))
	raw := make([][]*big.Float, len(groups))
	var batch []*big.Float
	for g, rs := range groups {
		n := len(rs)
		out[g] = make([]float64, n)
		raw[g] = make([]*big.Float, n)
		for i := range raw[g] {
			raw[g][i] = nf(0)
		}
		zero := n <= 1
		if !zero {
			zero = true
			for _, r := range rs[1:] {
				if r != rs[0] {
					zero = false
				}
			}
		}
		if !zero {
			sum := nf(0)
			for _, r := range rs {
				sum.Add(sum, nf(r))
			}
			mean := new(big.Float).SetPrec(prec).Quo(sum, nf(float64(n)))
			switch est {
			case GRPO:
				ss := nf(0)
				for _, r := range rs {
					d := new(big.Float).SetPrec(prec).Sub(nf(r), mean)
					ss.Add(ss, d.Mul(d, d))
				}
				std := new(big.Float).SetPrec(prec).Quo(ss, nf(float64(n-1)))
				std.Sqrt(std).Add(std, nf(eps))
				for i, r := range rs {
					raw[g][i].Sub(nf(r), mean).Quo(raw[g][i], std)
				}
			case DrGRPO, ReinforcePPBaseline:
				for i, r := range rs {
					raw[g][i].Sub(nf(r), mean)
				}
			case RLOO:
				for i, r := range rs {
					others := new(big.Float).SetPrec(prec).Sub(sum, nf(r))
					others.Quo(others, nf(float64(n-1)))
					raw[g][i].Sub(nf(r), others)
				}
			}
		}
		batch = append(batch, raw[g]...)
	}
	if est == ReinforcePPBaseline && len(batch) > 0 {
		mu := nf(0)
		for _, x := range batch {
			mu.Add(mu, x)
		}
		mu.Quo(mu, nf(float64(len(batch))))
		ss := nf(0)
		for _, x := range batch {
			d := new(big.Float).SetPrec(prec).Sub(x, mu)
			ss.Add(ss, d.Mul(d, d))
		}
		sigma := new(big.Float).SetPrec(prec).Quo(ss, nf(float64(len(batch))))
		sigma.Sqrt(sigma).Add(sigma, nf(eps))
		for _, a := range raw {
			for _, x := range a {
				x.Sub(x, mu).Quo(x, sigma)
			}
		}
	}
	for g, a := range raw {
		for i, x := range a {
			f, _ := x.Float64()
			out[g][i] = saturate(f)
		}
	}
	return out
}

// plainAdvantages is the textbook float64 formula, for rewards small enough
// not to overflow.
func plainAdvantages(est Estimator, eps float64, groups [][]float64) [][]float64 {
	out := make([][]float64, len(groups))
	var batch []float64
	for g, rs := range groups {
		n := len(rs)
		a := make([]float64, n)
		out[g] = a
		zero := n <= 1
		for _, r := range rs {
			if r != rs[0] {
				zero = false
			}
		}
		if !zero {
			mean := 0.0
			for _, r := range rs {
				mean += r
			}
			mean /= float64(n)
			switch est {
			case GRPO:
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
		batch = append(batch, a...)
	}
	if est == ReinforcePPBaseline && len(batch) > 0 {
		var sum float64
		for _, x := range batch {
			sum += x
		}
		mu := sum / float64(len(batch))
		ss := 0.0
		for _, x := range batch {
			ss += (x - mu) * (x - mu)
		}
		sigma := math.Sqrt(ss / float64(len(batch)))
		for _, a := range out {
			for i := range a {
				a[i] = (a[i] - mu) / (sigma + eps)
			}
		}
	}
	return out
}

// TestPropertyAdvantagesExtremeRewards: for every estimator and any finite
// rewards — up to ±math.MaxFloat64 — every advantage is finite and equals
// the estimator's formula evaluated exactly (saturated at ±MaxFloat64 where
// the exact value is not representable), within rounding; for ordinary
// rewards it is bit-for-bit the plain float64 formula.
func TestPropertyAdvantagesExtremeRewards(t *testing.T) {
	const eps = 1e-6
	rng := rand.New(rand.NewPCG(14, 3))
	ests := []Estimator{GRPO, DrGRPO, RLOO, ReinforcePPBaseline}
	for iter := 0; iter < 400; iter++ {
		extreme := iter%2 == 0
		groups := make([][]float64, 1+rng.IntN(4))
		for g := range groups {
			groups[g] = make([]float64, 1+rng.IntN(8))
			for i := range groups[g] {
				if extreme {
					groups[g][i] = extremeReward(rng)
				} else {
					groups[g][i] = math.Round(rng.NormFloat64()*1e6) / 8
				}
			}
		}
		for _, est := range ests {
			adv, _, _, err := Advantages(AdvantageConfig{Estimator: est, Eps: eps}, groups)
			if err != nil {
				t.Fatal(err)
			}
			want := refAdvantages(est, eps, groups)
			plain := plainAdvantages(est, eps, groups)
			for g := range groups {
				scale := 1.0 // the magnitude the error is relative to
				if est == DrGRPO || est == RLOO {
					for _, r := range groups[g] {
						scale = max(scale, math.Abs(r))
					}
				}
				for i, a := range adv[g] {
					if math.IsNaN(a) || math.IsInf(a, 0) {
						t.Fatalf("%s rewards %v: advantage %d is %v", est, groups, i, a)
					}
					if math.Abs(a-want[g][i]) > 1e-9*scale {
						t.Fatalf("%s rewards %v: advantage [%d][%d] = %g, exact %g", est, groups, g, i, a, want[g][i])
					}
					if !extreme && a != plain[g][i] {
						t.Fatalf("%s rewards %v: advantage [%d][%d] = %g, plain formula %g", est, groups, g, i, a, plain[g][i])
					}
				}
			}
		}
	}
}

// TestAdvantagesOverflowTable pins the cases of the report: 1.7e308 next to
// ordinary rewards made RLOO +Inf and GRPO all zeros.
func TestAdvantagesOverflowTable(t *testing.T) {
	tests := []struct {
		est    Estimator
		groups [][]float64
		want   [][]float64
	}{
		{GRPO, [][]float64{{1.7e308, 0, 0, 0}}, [][]float64{{1.5, -.5, -.5, -.5}}},
		{GRPO, [][]float64{{1.7e308, -1.7e308}}, [][]float64{{1 / math.Sqrt2, -1 / math.Sqrt2}}},
		{RLOO, [][]float64{{1.7e308, 0}}, [][]float64{{1.7e308, -1.7e308}}},
		{RLOO, [][]float64{{1.7e308, -1.7e308}}, [][]float64{{math.MaxFloat64, -math.MaxFloat64}}},
		{DrGRPO, [][]float64{{1.7e308, -1.7e308, -1.7e308}}, [][]float64{{math.MaxFloat64, -1.7e308 / 3 * 2, -1.7e308 / 3 * 2}}},
	}
	for _, tc := range tests {
		adv, _, _, err := Advantages(AdvantageConfig{Estimator: tc.est}, tc.groups)
		if err != nil {
			t.Fatal(err)
		}
		for g := range tc.want {
			for i, w := range tc.want[g] {
				if a := adv[g][i]; math.Abs(a-w) > 1e-6*math.Max(1, math.Abs(w)) {
					t.Errorf("%s %v: advantage %d = %g, want %g", tc.est, tc.groups, i, a, w)
				}
			}
		}
	}
	if _, _, _, err := Advantages(AdvantageConfig{}, [][]float64{{1, math.Inf(1)}}); err == nil {
		t.Error("an infinite reward was accepted")
	}
}

// TestExportExtremeRewards: a group holding a reward of 1.7e308 (data
// stored before the gateway bounded rewards) builds samples with finite
// advantages under every estimator, and they export as JSON lines (the
// report: RLOO failed on "json: unsupported value: +Inf").
func TestExportExtremeRewards(t *testing.T) {
	var seq int64
	f := func(x float64) *float64 { return &x }
	calls := func(id string) []api.ModelCall { return []api.ModelCall{call(id+"-c0", 1, []int32{1, 2}, []int32{3})} }
	var rs []store.Rollout
	evs := map[string][]store.Event{}
	for i, r := range []float64{1.7e308, -1.7e308, 0, 1} {
		id := fmt.Sprint("r", i)
		rs = append(rs, store.Rollout{ID: id, GroupID: "g", Status: store.RolloutSucceeded, Mode: store.ModeTrain})
		evs[id] = toEvents(t, &seq, id, id+"-a1", calls(id), f(r))
	}
	for _, est := range []Estimator{GRPO, DrGRPO, RLOO, ReinforcePPBaseline} {
		res, err := FromRollouts(rs, evs, Config{Advantage: AdvantageConfig{Estimator: est}, Aggregation: RolloutMean})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range res.Samples {
			if math.IsNaN(s.Advantage) || math.IsInf(s.Advantage, 0) {
				t.Errorf("%s: rollout %s advantage %v", est, s.RolloutID, s.Advantage)
			}
		}
		if err := WriteJSONL(io.Discard, res.Samples); err != nil {
			t.Errorf("%s: export: %v", est, err)
		}
	}
}
