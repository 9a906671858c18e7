package samples

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/aglrl/agl/store"
)

// RewardConfig controls how a rollout's reward is resolved.
type RewardConfig struct {
	// Fill is the reward used when a rollout has none (Missing is then set).
	Fill float64
	// Primary, when set, names the dimension trained on for multi-dimensional
	// rewards, overriding the event's own "primary".
	Primary string
	// AddCallRewards adds the sum of a rollout's intermediate (per-call)
	// rewards to its final reward before advantages are computed. Off: they
	// are only carried on the samples (CallRewards).
	AddCallRewards bool
	// LengthPenalty λ ≥ 0 and LengthPenaltyTokens L > 0 shape the reward
	// trained on by the length of the rollout's answers: with T the
	// response tokens of all the final attempt's calls,
	// R' = R − λ·min(1, T/L) when R > 0; a reward ≤ 0 is left alone, so
	// that a group that failed throughout stays uniform (dropped) instead
	// of training the policy to give up sooner. Only the trained value
	// changes (advantages); the rollout's stored reward and the success
	// rate do not. λ = 0: off.
	LengthPenalty       float64
	LengthPenaltyTokens int
}

// LengthPenalty is λ·min(1, T/L) (see RewardConfig.LengthPenalty); 0 when
// λ or L is not positive.
func LengthPenalty(lambda float64, tokens, limit int) float64 {
	if lambda <= 0 || limit <= 0 {
		return 0
	}
	return lambda * min(1, float64(tokens)/float64(limit))
}

// RolloutReward is the resolved reward of one attempt.
type RolloutReward struct {
	// Value is the primary value of the last final reward event (Fill when
	// Missing).
	Value   float64
	Missing bool
	// Values holds every dimension of that event (nil for a scalar reward).
	Values map[string]float64
	// CallRewards maps a call id to its last intermediate reward.
	CallRewards map[string]float64
	// Bad counts reward events that did not parse or had no usable primary.
	Bad int
}

// ResolveReward resolves the "reward" events of one attempt by the one
// reward rule (store.ResolveRewards), each valued by cfg.Primary when set,
// else its own primary: of the final (call-less) rewards, the last of the
// highest store.Reward.Rank wins (an evaluator's over the reward file's
// over those the harness posted, as the store's reward summary); rewards
// naming a call are intermediate and the last one per call wins. When an
// evaluator's reward is there, the harness's rewards — per-call ones
// included — are diagnostics only and not used.
func ResolveReward(cfg RewardConfig, events []store.Event, attemptID string) RolloutReward {
	evs := make([]store.Event, 0, 2)
	for _, e := range events {
		if e.Type == store.EventReward && (attemptID == "" || e.AttemptID == attemptID) {
			evs = append(evs, e)
		}
	}
	slices.SortStableFunc(evs, func(a, b store.Event) int { return cmpInt64(a.Seq, b.Seq) })
	datas := make([]json.RawMessage, len(evs))
	for i, e := range evs {
		datas[i] = e.Data
	}
	res := store.ResolveRewards(datas, func(r store.Reward) (float64, error) { return primary(cfg, r) })
	out := RolloutReward{Value: cfg.Fill, Missing: true, CallRewards: res.Calls, Bad: res.Bad}
	if res.Final >= 0 {
		out.Value, out.Missing, out.Values = res.Value, false, res.Reward.Values
	}
	if cfg.AddCallRewards {
		// Sorted keys: a deterministic float sum.
		for _, k := range slices.Sorted(maps.Keys(out.CallRewards)) {
			out.Value += out.CallRewards[k]
		}
	}
	return out
}

func primary(cfg RewardConfig, r store.Reward) (float64, error) {
	if cfg.Primary != "" && r.Value == nil {
		v, ok := r.Values[cfg.Primary]
		if !ok {
			return 0, fmt.Errorf("reward: primary %q not among values", cfg.Primary)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("reward: value %v is not finite", v)
		}
		return v, nil
	}
	return r.PrimaryValue()
}
