package samples

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// Config is the whole rollouts → samples pipeline.
type Config struct {
	Build     BuildConfig
	Reward    RewardConfig
	Advantage AdvantageConfig
	// Credit shares each rollout's outcome among its calls (see Credit).
	Credit CreditConfig
	// Shaping adds intermediate rewards from tool-call outcomes (see
	// ShapingConfig); zero weights: none.
	Shaping ShapingConfig
	// Aggregation sets the per-token weights; "" leaves Weights nil.
	Aggregation Aggregation
	// TrainAgents, when not empty, lists the agents whose calls train
	// ("" is the default agent); the other agents' calls are recorded but
	// not trained: their samples are left out (Excluded "frozen_agent")
	// and take no part in advantage normalisation.
	TrainAgents []string
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
	// Duplicates counts calls dropped because a later call of the same
	// attempt and agent had identical prompt ids (a retry: the last one
	// is kept, as Agent Lightning does).
	Duplicates int `json:"duplicate_calls,omitempty"`
	// TrainedByAgent splits TrainedTokens by agent when any call named one.
	TrainedByAgent map[string]int `json:"trained_tokens_by_agent,omitempty"`
	// ToolErrors and MalformedToolCalls count what shaping rewarded.
	ToolErrors         int `json:"tool_errors,omitempty"`
	MalformedToolCalls int `json:"malformed_tool_calls,omitempty"`
	// StalenessMean and StalenessMax describe the samples returned
	// (Sample.Staleness). StaleGroups, StaleRollouts and StaleSamples count
	// what exceeded StalenessConfig.Max: dropped, unless Keep.
	StalenessMean float64 `json:"staleness_mean"`
	StalenessMax  int64   `json:"staleness_max"`
	StaleGroups   int     `json:"stale_groups,omitempty"`
	StaleRollouts int     `json:"stale_rollouts,omitempty"`
	StaleSamples  int     `json:"stale_samples,omitempty"`
	// LengthPenalty sums the penalties taken off the rewards of the
	// Penalized rollouts (RewardConfig.LengthPenalty).
	LengthPenalty float64 `json:"length_penalty,omitempty"`
	Penalized     int     `json:"penalized_rollouts,omitempty"`
}

// responseTokens counts the tokens generated for calls.
func responseTokens(calls []api.ModelCall) int {
	n := 0
	for _, c := range calls {
		n += len(c.ResponseIDs)
	}
	return n
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
		calls, dups := Dedup(calls)
		for _, c := range dups {
			bad = append(bad, Excluded{RolloutID: r.ID, AttemptID: att, CallID: c, Reason: "duplicate_prompt",
				Detail: "a later call of the attempt had the same prompt ids"})
		}
		res.Stats.Duplicates += len(dups)
		ss, excl := Build(cfg.Build, r.ID, r.GroupID, att, calls)
		res.Excluded = append(res.Excluded, bad...)
		res.Excluded = append(res.Excluded, excl...)
		if len(cfg.TrainAgents) > 0 {
			kept := ss[:0]
			for _, s := range ss {
				if slices.Contains(cfg.TrainAgents, s.Agent) {
					kept = append(kept, s)
					continue
				}
				for _, id := range s.CallIDs {
					res.Excluded = append(res.Excluded, Excluded{RolloutID: r.ID, AttemptID: att, CallID: id, Reason: "frozen_agent",
						Detail: "agent " + strconv.Quote(s.Agent) + " is not in train_agents"})
				}
			}
			ss = kept
		}
		rw := ResolveReward(cfg.Reward, evs, att)
		if cfg.Shaping.Enabled() {
			sh := Shape(cfg.Shaping, evs, att)
			addShaping(cfg.Reward, &rw, sh)
			res.Stats.ToolErrors += sh.ToolErrors
			res.Stats.MalformedToolCalls += sh.MalformedToolCalls
		}
		res.Stats.BadRewards += rw.Bad
		if pen := LengthPenalty(cfg.Reward.LengthPenalty, responseTokens(calls), cfg.Reward.LengthPenaltyTokens); pen > 0 && !rw.Missing && rw.Value > 0 {
			rw.Value -= pen
			res.Stats.LengthPenalty += pen
			res.Stats.Penalized++
		}
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
	units, lists := creditUnits(cfg.Credit, groupOrder, groups, func(i int) ([]Sample, RolloutReward) { return per[i].ss, per[i].reward })
	adv, keep, gst, err := Advantages(cfg.Advantage, lists)
	if err != nil {
		return Result{}, err
	}
	res.Stats.Groups = gst
	type ra struct {
		roll  int
		agent string
	}
	rollAdv := map[ra]float64{}     // rollout-level modes
	callAdv := map[[2]int]float64{} // per-call modes: (rollout, call seq)
	lastCall := map[ra]int{}        // last_call: the seq of the agent's last call
	kept := map[ra]bool{}
	for l, us := range units {
		for k, u := range us {
			key := ra{u.roll, u.agent}
			kept[key] = keep[l]
			if u.call < 0 {
				rollAdv[key] = adv[l][k]
				lastCall[key] = u.last
			} else {
				callAdv[[2]int{u.roll, u.call}] = adv[l][k]
			}
		}
	}
	perCall := cfg.Credit.Mode == CreditPerCall || cfg.Credit.Mode == CreditDiscounted
	for _, key := range groupOrder {
		for _, i := range groups[key] {
			b := per[i]
			for _, s := range b.ss {
				k := ra{i, s.Agent}
				if !kept[k] {
					continue
				}
				s.Reward = b.reward.Value
				s.RewardMissing = b.reward.Missing
				if perCall {
					s.CallAdvantages = make([]float64, len(s.CallSeqs))
					for j, seq := range s.CallSeqs {
						s.CallAdvantages[j] = callAdv[[2]int{i, seq}]
					}
					s.Advantage = s.CallAdvantages[0]
				} else {
					s.Advantage = rollAdv[k]
				}
				if cfg.Credit.Mode == CreditLastCall && !maskAllButLast(&s, lastCall[k], &res.Excluded) {
					continue
				}
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
		if s.Agent != "" || res.Stats.TrainedByAgent != nil {
			if res.Stats.TrainedByAgent == nil {
				res.Stats.TrainedByAgent = map[string]int{}
				for _, p := range res.Samples[:i] {
					res.Stats.TrainedByAgent[p.Agent] += p.Trained()
				}
			}
			res.Stats.TrainedByAgent[s.Agent] += s.Trained()
		}
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
