package samples

import (
	"fmt"

	"github.com/aglrl/agl/store"
)

// Config is the whole rollouts → samples pipeline.
type Config struct {
	Build     BuildConfig
	Reward    RewardConfig
	Advantage AdvantageConfig
	// Aggregation sets the per-token weights; "" leaves Weights nil.
	Aggregation Aggregation
	// DropMissingReward drops rollouts without a reward instead of training
	// them with RewardConfig.Fill.
	DropMissingReward bool
	// IncludeVal keeps rollouts of mode "val" (skipped by default: they do
	// not train). Cancelled and non-terminal rollouts are always skipped.
	IncludeVal bool
	// Staleness measures (and may bound) how many versions behind the
	// trained policy the samples' generating policy is.
	Staleness StalenessConfig
}

// StalenessConfig measures and bounds staleness (asynchronous training).
type StalenessConfig struct {
	// Current is the model version the update starts from; 0 turns
	// staleness off (nothing measured, nothing dropped).
	Current int64
	// Max bounds a group's staleness, the largest of its samples': a
	// staler group is dropped whole (its advantages are relative to each
	// other), or trained anyway and only counted when Keep. Negative: no
	// bound.
	Max  int64
	Keep bool
}

// Stats reports what FromRollouts did.
type Stats struct {
	Rollouts       int                 `json:"rollouts"`
	Skipped        int                 `json:"skipped_rollouts"`
	MissingReward  int                 `json:"missing_reward"`
	DroppedMissing int                 `json:"dropped_missing_reward"`
	BadRewards     int                 `json:"bad_reward_events"`
	Calls          int                 `json:"calls"`
	Samples        int                 `json:"samples"`
	Excluded       map[string]int      `json:"excluded,omitempty"`
	Splits         map[SplitReason]int `json:"splits"`
	Tokens         int                 `json:"tokens"`
	TrainedTokens  int                 `json:"trained_tokens"`
	Groups         GroupStats          `json:"groups"`
	// StalenessMean and StalenessMax describe the samples returned
	// (Sample.Staleness). StaleGroups, StaleRollouts and StaleSamples count
	// what exceeded StalenessConfig.Max: dropped, unless Keep.
	StalenessMean float64 `json:"staleness_mean"`
	StalenessMax  int64   `json:"staleness_max"`
	StaleGroups   int     `json:"stale_groups,omitempty"`
	StaleRollouts int     `json:"stale_rollouts,omitempty"`
	StaleSamples  int     `json:"stale_samples,omitempty"`
}

// Result is the output of FromRollouts.
type Result struct {
	Samples  []Sample
	Excluded []Excluded
	Stats    Stats
}

// FromRollouts builds the training samples of one step from terminal
// rollouts and their events (eventsByRollout[rollout id], any order; events
// of other attempts and types are ignored). Only the final attempt's calls
// and rewards count (FinalAttempt). Rollouts are grouped by GroupID (a
// rollout without one is a group of its own); advantages are computed per
// group and broadcast to every sample of the rollout; then weights are
// applied over all resulting samples.
func FromRollouts(rollouts []store.Rollout, eventsByRollout map[string][]store.Event, cfg Config) (Result, error) {
	res := Result{Stats: Stats{Splits: map[SplitReason]int{}}}
	type built struct {
		ss     []Sample
		reward RolloutReward
	}
	var groupOrder []string
	groups := map[string][]int{} // group key → indexes into per
	var per []built
	for _, r := range rollouts {
		if !r.Status.Terminal() || r.Status == store.RolloutCancelled || (r.Mode == store.ModeVal && !cfg.IncludeVal) {
			res.Stats.Skipped++
			continue
		}
		res.Stats.Rollouts++
		evs := eventsByRollout[r.ID]
		att := FinalAttempt(r, evs)
		calls, bad := Calls(evs, att)
		res.Stats.Calls += len(calls) + len(bad)
		ss, excl := Build(cfg.Build, r.ID, r.GroupID, att, calls)
		res.Excluded = append(res.Excluded, bad...)
		res.Excluded = append(res.Excluded, excl...)
		rw := ResolveReward(cfg.Reward, evs, att)
		res.Stats.BadRewards += rw.Bad
		if rw.Missing {
			res.Stats.MissingReward++
			if cfg.DropMissingReward {
				res.Stats.DroppedMissing++
				continue
			}
		}
		key := "g:" + r.GroupID
		if r.GroupID == "" {
			key = "r:" + r.ID
		}
		if _, ok := groups[key]; !ok {
			groupOrder = append(groupOrder, key)
		}
		groups[key] = append(groups[key], len(per))
		per = append(per, built{ss: ss, reward: rw})
	}
	if sc := cfg.Staleness; sc.Current > 0 && sc.Max >= 0 {
		kept := groupOrder[:0]
		for _, key := range groupOrder {
			var worst int64
			n := 0
			for _, i := range groups[key] {
				for _, s := range per[i].ss {
					worst = max(worst, s.Staleness(sc.Current))
				}
				n += len(per[i].ss)
			}
			if worst > sc.Max {
				res.Stats.StaleGroups++
				res.Stats.StaleRollouts += len(groups[key])
				res.Stats.StaleSamples += n
				if !sc.Keep {
					continue
				}
			}
			kept = append(kept, key)
		}
		groupOrder = kept
	}
	rewards := make([][]float64, len(groupOrder))
	for g, key := range groupOrder {
		for _, i := range groups[key] {
			rewards[g] = append(rewards[g], per[i].reward.Value)
		}
	}
	adv, keep, gst, err := Advantages(cfg.Advantage, rewards)
	if err != nil {
		return Result{}, err
	}
	res.Stats.Groups = gst
	for g, key := range groupOrder {
		if !keep[g] {
			continue
		}
		for k, i := range groups[key] {
			b := per[i]
			for _, s := range b.ss {
				s.Advantage = adv[g][k]
				s.Reward = b.reward.Value
				s.RewardMissing = b.reward.Missing
				for _, id := range s.CallIDs {
					if v, ok := b.reward.CallRewards[id]; ok {
						if s.CallRewards == nil {
							s.CallRewards = map[string]float64{}
						}
						s.CallRewards[id] = v
					}
				}
				res.Samples = append(res.Samples, s)
			}
		}
	}
	if cfg.Aggregation != "" {
		if err := ApplyWeights(cfg.Aggregation, res.Samples); err != nil {
			return Result{}, err
		}
	}
	for i := range res.Samples {
		s := &res.Samples[i]
		res.Stats.Splits[s.Split.Reason]++
		res.Stats.Tokens += len(s.IDs)
		res.Stats.TrainedTokens += s.Trained()
		if c := cfg.Staleness.Current; c > 0 {
			st := s.Staleness(c)
			res.Stats.StalenessMean += float64(st)
			res.Stats.StalenessMax = max(res.Stats.StalenessMax, st)
		}
	}
	res.Stats.Samples = len(res.Samples)
	if len(res.Samples) > 0 {
		res.Stats.StalenessMean /= float64(len(res.Samples))
	}
	for _, e := range res.Excluded {
		if res.Stats.Excluded == nil {
			res.Stats.Excluded = map[string]int{}
		}
		res.Stats.Excluded[e.Reason]++
	}
	return res, nil
}

// Staleness is how many versions the policy that generated s is behind
// current: current minus the oldest version among s.ModelVersions (version
// 0, unknown, is ignored), never below 0.
func (s *Sample) Staleness(current int64) int64 {
	oldest := int64(0)
	for _, v := range s.ModelVersions {
		if v > 0 && (oldest == 0 || v < oldest) {
			oldest = v
		}
	}
	if oldest == 0 || oldest >= current {
		return 0
	}
	return current - oldest
}

// String is a one-line summary.
func (s Stats) String() string {
	return fmt.Sprintf("rollouts=%d skipped=%d calls=%d samples=%d tokens=%d trained=%d missing_reward=%d groups=%d zero_var=%d dropped_groups=%d stale_groups=%d staleness=%.2f/%d excluded=%v splits=%v",
		s.Rollouts, s.Skipped, s.Calls, s.Samples, s.Tokens, s.TrainedTokens, s.MissingReward,
		s.Groups.Groups, s.Groups.ZeroVariance, s.Groups.Dropped, s.StaleGroups, s.StalenessMean, s.StalenessMax, s.Excluded, s.Splits)
}
