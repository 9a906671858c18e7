package store

import (
	"encoding/json"
	"fmt"
	"math"
)

// Reward is the data of a "reward" event. Either Value is set, or Values
// holds several named dimensions of which Primary is the one trained on.
// CallID, when set, makes it an intermediate reward for that call.
type Reward struct {
	Value   *float64           `json:"value,omitempty"`
	Values  map[string]float64 `json:"values,omitempty"`
	Primary string             `json:"primary,omitempty"`
	CallID  string             `json:"call_id,omitempty"`
	// Source is set by the controller on the rewards it appends
	// (SourceEvaluator, SourceRewardFile); empty for a reward the harness
	// posted. See Rank.
	Source string `json:"source,omitempty"`
}

// PrimaryValue returns the reward trained on.
func (r Reward) PrimaryValue() (float64, error) {
	var v float64
	switch {
	case r.Value != nil:
		v = *r.Value
	case len(r.Values) > 0:
		key := r.Primary
		if key == "" && len(r.Values) == 1 {
			for k := range r.Values {
				key = k
			}
		}
		x, ok := r.Values[key]
		if !ok {
			return 0, fmt.Errorf("reward: primary %q not among values", r.Primary)
		}
		v = x
	default:
		return 0, fmt.Errorf("reward: neither value nor values given")
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("reward: value %v is not finite", v)
	}
	return v, nil
}

// ParseReward decodes a reward event's data. A bare JSON number is accepted
// as {"value": n}.
func ParseReward(data json.RawMessage) (Reward, error) {
	var n float64
	if err := json.Unmarshal(data, &n); err == nil {
		return Reward{Value: &n}, nil
	}
	var r Reward
	if err := json.Unmarshal(data, &r); err != nil {
		return Reward{}, fmt.Errorf("reward: %w", err)
	}
	if _, err := r.PrimaryValue(); err != nil {
		return Reward{}, err
	}
	return r, nil
}

// Reward sources the controller stamps on the rewards it appends
// (Reward.Source). A harness never sets one: the gateway refuses a reward
// with a source from a scoped attempt key.
const (
	// SourceEvaluator marks the evaluator's reward: it outranks every
	// reward the harness sent, final or per call, whenever they arrived.
	SourceEvaluator = "evaluator"
	// SourceRewardFile marks the harness's reward file: it outranks the
	// reward events the harness posted.
	SourceRewardFile = "reward_file"
)

// Rank orders rewards by who stands behind them: the evaluator (2), the
// reward file as the controller read it (1), an event the harness posted (0).
func (r Reward) Rank() int {
	switch r.Source {
	case SourceEvaluator:
		return rankEvaluator
	case SourceRewardFile:
		return 1
	}
	return 0
}

const rankEvaluator = 2

// ResolvedRewards is what the reward events of one attempt resolve to.
type ResolvedRewards struct {
	// Final is the index of the final reward trained on in the data given
	// to ResolveRewards, -1 when there is none; Value is its value and
	// Reward the reward itself.
	Final  int
	Value  float64
	Reward Reward
	// Calls maps a call id to its last per-call reward (nil: none).
	Calls map[string]float64
	// Bad counts rewards that did not parse or whose value failed.
	Bad int
}

// ResolveRewards is the reward rule, for the store's reward summary,
// the samples and the controller alike. It reads the data of one
// attempt's reward events oldest first (a JSON number or a Reward), each
// valued by value (Reward.PrimaryValue, or a trainer's choice of
// dimension): of the final rewards (no CallID), the last of the highest
// Rank is the one trained on — an evaluator's reward whatever the
// harness posted after it, else the reward file's, else the last the
// harness posted. A reward naming a call is that call's, the last one
// per call winning; when an evaluator's final reward is there, the
// harness's per-call rewards are diagnostics only and left out.
func ResolveRewards(oldestFirst []json.RawMessage, value func(Reward) (float64, error)) ResolvedRewards {
	type parsed struct {
		i int
		r Reward
		v float64
	}
	ps := make([]parsed, 0, len(oldestFirst))
	out := ResolvedRewards{Final: -1}
	top := -1 // the highest rank of a usable final reward
	for i, d := range oldestFirst {
		r, err := ParseReward(d)
		if err != nil {
			// ParseReward refuses a multi-dimensional reward whose own
			// primary is missing; value may still find its dimension.
			r = Reward{}
			if json.Unmarshal(d, &r) != nil {
				out.Bad++
				continue
			}
		}
		v, err := value(r)
		if err != nil {
			out.Bad++
			continue
		}
		ps = append(ps, parsed{i, r, v})
		if r.CallID == "" {
			top = max(top, r.Rank())
		}
	}
	for _, p := range ps {
		if p.r.CallID != "" {
			if top == rankEvaluator && p.r.Rank() < rankEvaluator {
				continue // the harness's shaping does not touch an evaluator's reward
			}
			if out.Calls == nil {
				out.Calls = map[string]float64{}
			}
			out.Calls[p.r.CallID] = p.v
			continue
		}
		if p.r.Rank() == top {
			out.Final, out.Value, out.Reward = p.i, p.v, p.r
		}
	}
	return out
}

// RewardSummary is the reward a store keeps on a rollout for its
// attempt: the final reward ResolveRewards picks from the data of the
// attempt's reward events (oldest first), valued by its primary. ok is
// false when there is none.
func RewardSummary(oldestFirst []json.RawMessage) (value float64, data json.RawMessage, ok bool) {
	r := ResolveRewards(oldestFirst, Reward.PrimaryValue)
	if r.Final < 0 {
		return 0, nil, false
	}
	return r.Value, oldestFirst[r.Final], true
}
