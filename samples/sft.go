package samples

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/aglrl/agl/store"
)

// SFTFilter selects the stored rollouts and calls that supervised
// fine-tuning from the store trains on (rejection sampling: e.g. the
// rollouts whose reward reached MinReward). The zero value keeps every
// terminal rollout that was not cancelled, and all its calls.
type SFTFilter struct {
	// MinReward, when set, keeps rollouts whose reward is at least this
	// (a rollout without a reward is left out).
	MinReward *float64
	// Mode, when set, keeps rollouts of this mode (train or val).
	Mode store.Mode
	// Steps, when set, keeps rollouts whose metadata names a training
	// step in [Steps[0], Steps[1]] (agl train records "step"; a rollout
	// without one is left out).
	Steps *[2]int
	// Agents, when set, keeps these agents' calls ("" the default agent).
	Agents []string
	// Policy, when set, keeps the calls served by this model (the policy
	// name the gateway recorded as the call's model).
	Policy string
}

// String describes the filter for messages ("all stored rollouts" when
// it selects everything).
func (f SFTFilter) String() string {
	var parts []string
	if f.MinReward != nil {
		parts = append(parts, "reward ≥ "+strconv.FormatFloat(*f.MinReward, 'g', -1, 64))
	}
	if f.Mode != "" {
		parts = append(parts, "mode "+string(f.Mode))
	}
	if f.Steps != nil {
		parts = append(parts, fmt.Sprintf("steps %d..%d", f.Steps[0], f.Steps[1]))
	}
	if f.Agents != nil {
		q := make([]string, len(f.Agents))
		for i, a := range f.Agents {
			q[i] = strconv.Quote(a)
		}
		parts = append(parts, "agents "+strings.Join(q, ", "))
	}
	if f.Policy != "" {
		parts = append(parts, "policy "+f.Policy)
	}
	if len(parts) == 0 {
		return "all stored rollouts"
	}
	return strings.Join(parts, ", ")
}

// ParseStepRange parses "A..B" (inclusive, 0 ≤ A ≤ B) or "A" (A..A).
func ParseStepRange(s string) ([2]int, error) {
	a, b, ok := strings.Cut(s, "..")
	if !ok {
		b = a
	}
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	if err1 != nil || err2 != nil || lo < 0 || hi < lo {
		return [2]int{}, fmt.Errorf("step range %q: want A..B with 0 ≤ A ≤ B", s)
	}
	return [2]int{lo, hi}, nil
}

// SFTStats counts what SFTSamples read, left out and kept.
type SFTStats struct {
	// Rollouts is the terminal rollouts read; Matched those the
	// rollout-level filters kept. Each Off* counts the rollouts one
	// filter left out (the first that did), Skipped the cancelled or not
	// terminal ones.
	Rollouts     int `json:"rollouts"`
	Skipped      int `json:"skipped"`
	OffMode      int `json:"off_mode,omitempty"`
	OffSteps     int `json:"off_steps,omitempty"`
	OffReward    int `json:"off_reward,omitempty"`
	NoReward     int `json:"no_reward,omitempty"`
	Matched      int `json:"matched_rollouts"`
	Calls        int `json:"calls"`
	OffAgent     int `json:"off_agent_calls,omitempty"`
	OffPolicy    int `json:"off_policy_calls,omitempty"`
	RetriedCalls int `json:"retried_calls,omitempty"`
	// Excluded counts the calls Build left out (no token ids, …).
	Excluded   int `json:"excluded_calls,omitempty"`
	Duplicates int `json:"duplicate_samples,omitempty"`
	// Samples, Tokens and TrainedTokens describe what trains.
	Samples       int `json:"samples"`
	Tokens        int `json:"tokens"`
	TrainedTokens int `json:"trained_tokens"`
}

// SFTSamples selects the calls of the final attempts of rollouts (as Load
// returns them) that f keeps and builds their samples as training does
// (Build with cfg: merged across the calls of an attempt, loss masks as
// recorded: the responses' ids train, the prompts' do not), exact ids,
// no re-tokenisation. Retried calls (Dedup) and samples whose ids and
// mask equal an earlier one's are left out, so the same transcript
// trains once. Samples keep their rollout's reward; advantages are not
// computed.
func SFTSamples(rollouts []store.Rollout, events map[string][]store.Event, f SFTFilter, cfg BuildConfig) ([]Sample, SFTStats) {
	var st SFTStats
	var out []Sample
	seen := map[uint64][]int{}
	for _, r := range rollouts {
		st.Rollouts++
		if !r.Status.Terminal() || r.Status == store.RolloutCancelled {
			st.Skipped++
			continue
		}
		if f.Mode != "" && r.Mode != f.Mode {
			st.OffMode++
			continue
		}
		if f.Steps != nil {
			var md struct {
				Step *int `json:"step"`
			}
			if json.Unmarshal(r.Metadata, &md) != nil || md.Step == nil || *md.Step < f.Steps[0] || *md.Step > f.Steps[1] {
				st.OffSteps++
				continue
			}
		}
		evs := events[r.ID]
		att := FinalAttempt(r, evs)
		rw := ResolveReward(RewardConfig{}, evs, att)
		if f.MinReward != nil {
			if rw.Missing {
				st.NoReward++
				continue
			}
			if rw.Value < *f.MinReward {
				st.OffReward++
				continue
			}
		}
		st.Matched++
		calls, bad := Calls(evs, att)
		st.Calls += len(calls) + len(bad)
		st.Excluded += len(bad)
		kept := calls[:0]
		for _, c := range calls {
			switch {
			case f.Agents != nil && !slices.Contains(f.Agents, c.Agent):
				st.OffAgent++
			case f.Policy != "" && c.Model != f.Policy:
				st.OffPolicy++
			default:
				kept = append(kept, c)
			}
		}
		kept, dups := Dedup(kept)
		st.RetriedCalls += len(dups)
		ss, excl := Build(cfg, r.ID, r.GroupID, att, kept)
		st.Excluded += len(excl)
		for _, s := range ss {
			if s.Trained() == 0 {
				continue
			}
			h := sampleHash(&s)
			if slices.ContainsFunc(seen[h], func(i int) bool {
				return slices.Equal(out[i].IDs, s.IDs) && slices.Equal(out[i].LossMask, s.LossMask)
			}) {
				st.Duplicates++
				continue
			}
			seen[h] = append(seen[h], len(out))
			s.Reward, s.RewardMissing = rw.Value, rw.Missing
			st.Samples++
			st.Tokens += len(s.IDs)
			st.TrainedTokens += s.Trained()
			out = append(out, s)
		}
	}
	return out, st
}

// sampleHash is FNV-1a over a sample's ids and loss mask.
func sampleHash(s *Sample) uint64 {
	h := fnv.New64a()
	var b [5]byte
	for i, id := range s.IDs {
		b[0], b[1], b[2], b[3], b[4] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24), s.LossMask[i]
		h.Write(b[:])
	}
	return h.Sum64()
}

// Why names, for an empty SFTSamples result, what left everything out.
func (s SFTStats) Why() string {
	if s.Rollouts == 0 {
		return "the store holds no terminal rollout"
	}
	var parts []string
	add := func(n int, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(s.Skipped, "cancelled")
	add(s.OffMode, "of another mode")
	add(s.OffSteps, "of other steps")
	add(s.NoReward, "without a reward")
	add(s.OffReward, "below the reward")
	out := fmt.Sprintf("%d rollouts read, %d matched", s.Rollouts, s.Matched)
	if len(parts) > 0 {
		out += " (left out: " + strings.Join(parts, ", ") + ")"
	}
	parts = parts[:0]
	add(s.OffAgent, "of other agents")
	add(s.OffPolicy, "of other policies")
	add(s.Excluded, "without usable token ids")
	if len(parts) > 0 {
		out += fmt.Sprintf("; of their %d calls left out: %s", s.Calls, strings.Join(parts, ", "))
	}
	if s.Duplicates > 0 {
		out += fmt.Sprintf("; %d duplicate samples", s.Duplicates)
	}
	return out
}
