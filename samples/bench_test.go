package samples

import (
	"math/rand/v2"
	"testing"
)

// toolUse8 is a synthetic 8-turn tool-use rollout: a ~600-token system
// prompt with tool schemas, a ~100-token task, then 8 turns of a ~150-token
// response (a tool call) followed by a ~400-token tool result.
var toolUse8 = synthOpts{turns: 8, sysLen: 600, userLen: 100, respLen: 150, toolLen: 400, version: 1}

// BenchmarkFromRollouts measures samples built per second from stored-style
// events (JSON-encoded model_request and reward events of 16 groups × 8
// rollouts): decoding, merging, rewards, GRPO advantages and rollout-mean
// weights.
func BenchmarkFromRollouts(b *testing.B) {
	for _, tc := range []struct {
		name string
		o    synthOpts
	}{
		{"clean", toolUse8},
		{"rerender10pct", func() synthOpts { o := toolUse8; o.pRerender = .1; return o }()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(21, 22))
			rs, evs := synthStep(b, rng, 16, 8, tc.o)
			cfg := Config{Advantage: AdvantageConfig{Estimator: GRPO}, Aggregation: RolloutMean}
			var n, toks int
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := FromRollouts(rs, evs, cfg)
				if err != nil {
					b.Fatal(err)
				}
				n += len(res.Samples)
				toks += res.Stats.Tokens
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(n)/sec, "samples/s")
			b.ReportMetric(float64(len(rs)*b.N)/sec, "rollouts/s")
			b.ReportMetric(float64(toks)/sec/1e6, "Mtokens/s")
		})
	}
}

// BenchmarkMergeTokenRatio reports the number of tokens a trainer processes
// on synthetic 8-turn tool-use rollouts with merging and with one sample per
// call, and their ratio (goal ≤ 1/3), raw and after padding into 16k-token
// batches. The trained tokens are the same in both.
func BenchmarkMergeTokenRatio(b *testing.B) {
	for _, tc := range []struct {
		name string
		o    synthOpts
	}{
		{"clean", toolUse8},
		{"rerender10pct", func() synthOpts { o := toolUse8; o.pRerender = .1; return o }()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(23, 24))
			rs, evs := synthStep(b, rng, 16, 8, tc.o)
			var merged, perCall Result
			var err error
			for b.Loop() {
				if merged, err = FromRollouts(rs, evs, Config{}); err != nil {
					b.Fatal(err)
				}
				if perCall, err = FromRollouts(rs, evs, Config{Build: BuildConfig{NoMerge: true}}); err != nil {
					b.Fatal(err)
				}
			}
			if merged.Stats.TrainedTokens != perCall.Stats.TrainedTokens {
				b.Fatalf("trained tokens differ: %d vs %d", merged.Stats.TrainedTokens, perCall.Stats.TrainedTokens)
			}
			_, pm := Pack(merged.Samples, 16384, 0)
			_, pc := Pack(perCall.Samples, 16384, 0)
			b.ReportMetric(float64(merged.Stats.Tokens)/float64(len(rs)), "tokens/rollout_merged")
			b.ReportMetric(float64(perCall.Stats.Tokens)/float64(len(rs)), "tokens/rollout_per_call")
			b.ReportMetric(float64(merged.Stats.Tokens)/float64(perCall.Stats.Tokens), "token_ratio")
			b.ReportMetric(float64(pm.Padded)/float64(pc.Padded), "padded_ratio")
			b.ReportMetric(float64(merged.Stats.Samples)/float64(len(rs)), "samples/rollout_merged")
		})
	}
}

// The merge ratio goal holds on the benchmark's rollouts (a test, so that a
// regression fails `go test`, not only a benchmark read by a person).
func TestMergeTokenRatioGoal(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	rs, evs := synthStep(t, rng, 4, 8, toolUse8)
	m, err := FromRollouts(rs, evs, Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := FromRollouts(rs, evs, Config{Build: BuildConfig{NoMerge: true}})
	if err != nil {
		t.Fatal(err)
	}
	if r := float64(m.Stats.Tokens) / float64(p.Stats.Tokens); r > 1./3 {
		t.Fatalf("merged/per-call tokens = %.3f > 1/3", r)
	}
}

// BenchmarkAdvantages: 64 groups of 8 rewards, ordinary and extreme (the
// scaled path).
func BenchmarkAdvantages(b *testing.B) {
	for _, tc := range []struct {
		name  string
		scale float64
	}{{"ordinary", 1}, {"extreme", 1e300}} {
		groups := make([][]float64, 64)
		for g := range groups {
			groups[g] = make([]float64, 8)
			for i := range groups[g] {
				groups[g][i] = float64((g*8+i)%5) * tc.scale
			}
		}
		for _, est := range []Estimator{GRPO, RLOO, ReinforcePPBaseline} {
			b.Run(tc.name+"/"+string(est), func(b *testing.B) {
				for b.Loop() {
					if _, _, _, err := Advantages(AdvantageConfig{Estimator: est}, groups); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
