package samples

import (
	"fmt"
	"math"
	"slices"

	"github.com/aglrl/agl/api"
)

// Credit names how a rollout's outcome is shared among its model calls
// before advantages are normalised. Notation, per rollout and per agent:
// R the rollout's outcome (its resolved reward, RolloutReward.Value), the
// agent's calls c_1 … c_m in the order they were made (those that landed
// in a sample), r_k the per-call reward of c_k (a "reward" event with the
// call's call_id; 0 when none) and G_k the return credited to c_k. A
// per-call reward is always added to the outcome, never replaces it.
type Credit string

const (
	// CreditBroadcast (also ""): G_k = R for every call (per-call rewards
	// only count through RewardConfig.AddCallRewards). One unit per rollout.
	CreditBroadcast Credit = "broadcast"
	// CreditPerCall: G_k = R + r_k. One unit per call.
	CreditPerCall Credit = "per_call"
	// CreditDiscounted: G_m = r_m + R, G_k = r_k + γ·G_{k+1}, i.e.
	// G_k = Σ_{j=k..m} γ^{j−k}·r_j + γ^{m−k}·R (γ = CreditConfig.Gamma).
	// One unit per call.
	CreditDiscounted Credit = "discounted"
	// CreditLastCall: only c_m trains, with G_m = R + r_m; the response
	// tokens of c_1 … c_{m−1} get loss mask 0 (Excluded "not_last_call").
	// One unit per rollout.
	CreditLastCall Credit = "last_call"
)

// CreditConfig selects the credit assignment.
type CreditConfig struct {
	Mode Credit
	// Gamma is γ of CreditDiscounted, in [0, 1] (0 there means 1).
	Gamma float64
}

// Credits lists the credit modes, for messages.
var Credits = []Credit{CreditBroadcast, CreditPerCall, CreditDiscounted, CreditLastCall}

// Validate reports an unknown mode or a γ outside [0, 1].
func (c CreditConfig) Validate() error {
	if c.Mode != "" && !slices.Contains(Credits, c.Mode) {
		return fmt.Errorf("samples: unknown credit assignment %q: want one of %v", c.Mode, Credits)
	}
	if math.IsNaN(c.Gamma) || c.Gamma < 0 || c.Gamma > 1 {
		return fmt.Errorf("samples: gamma %v: want a value in [0, 1]", c.Gamma)
	}
	return nil
}

// callReturns gives the returns G_k of one agent's calls of one rollout
// (calls in order; callRewards by call id; outcome R).
func (c CreditConfig) callReturns(calls []string, callRewards map[string]float64, outcome float64) []float64 {
	g := make([]float64, len(calls))
	switch c.Mode {
	case CreditPerCall:
		for k, id := range calls {
			g[k] = outcome + callRewards[id]
		}
	case CreditDiscounted:
		gamma := c.Gamma
		if gamma == 0 {
			gamma = 1
		}
		next := outcome
		for k := len(calls) - 1; k >= 0; k-- {
			g[k] = callRewards[calls[k]] + next
			next = gamma * g[k]
		}
	}
	return g
}

// ValidateNames checks the names a pipeline Config is built from, so that a
// command can refuse a bad configuration before any rollout runs.
func (c Config) ValidateNames() error {
	switch c.Advantage.Estimator {
	case GRPO, DrGRPO, RLOO, ReinforcePPBaseline, "":
	default:
		return fmt.Errorf("samples: unknown advantage estimator %q: want one of %v", c.Advantage.Estimator, Estimators)
	}
	if c.Aggregation != "" && !slices.Contains(Aggregations, c.Aggregation) {
		return fmt.Errorf("samples: unknown loss aggregation %q: want one of %v", c.Aggregation, Aggregations)
	}
	if err := c.Credit.Validate(); err != nil {
		return err
	}
	if err := c.Shaping.Validate(); err != nil {
		return err
	}
	if c.Shaping.Enabled() && (c.Credit.Mode == "" || c.Credit.Mode == CreditBroadcast) && !c.Reward.AddCallRewards {
		return fmt.Errorf("samples: intermediate_rewards are per-call rewards: broadcast credit ignores them; use credit per_call, discounted or last_call")
	}
	if c.Reward.AddCallRewards && c.Credit.Mode != "" && c.Credit.Mode != CreditBroadcast {
		return fmt.Errorf("samples: add_call_rewards sums per-call rewards into the outcome (broadcast credit); credit %q adds them per call already", c.Credit.Mode)
	}
	for _, a := range c.TrainAgents {
		if a == "" {
			continue // the default agent
		}
		if err := api.ValidAgentName(a); err != nil {
			return fmt.Errorf("samples: train_agents: %w", err)
		}
	}
	switch c.Build.Rule {
	case "", LengthTruncate, LengthDrop:
	default:
		return fmt.Errorf("samples: length rule %q: want truncate or drop", c.Build.Rule)
	}
	if c.Build.MaxPromptLen < 0 || c.Build.MaxResponseLen < 0 || c.Build.MaxSeqLen < 0 {
		return fmt.Errorf("samples: length limits must not be negative (prompt %d, response %d, sequence %d)",
			c.Build.MaxPromptLen, c.Build.MaxResponseLen, c.Build.MaxSeqLen)
	}
	return nil
}

// Estimators and Aggregations list the known names, for messages.
var (
	Estimators   = []Estimator{GRPO, DrGRPO, RLOO, ReinforcePPBaseline}
	Aggregations = []Aggregation{RolloutMean, TokenMean, SeqMeanTokenMean, SeqMeanTokenSum}
)

// DefaultAggregation is the loss aggregation of `agl train` and `agl
// export` when none is configured.
const DefaultAggregation = RolloutMean

// creditUnit is one value advantage estimation normalises: a rollout's
// (call < 0) or one call's return, for one agent.
type creditUnit struct {
	roll  int // index of the rollout in the pipeline
	agent string
	call  int // the call's position among the attempt's calls; -1 for a rollout unit
	last  int // rollout units: the position of the agent's last call (-1: none)
}

// agentCalls lists one agent's calls of a rollout in the order made.
type agentCalls struct {
	ids  []string
	seqs []int
}

func callsByAgent(ss []Sample) (order []string, by map[string]*agentCalls) {
	by = map[string]*agentCalls{}
	for _, s := range ss {
		ac := by[s.Agent]
		if ac == nil {
			ac = &agentCalls{}
			by[s.Agent] = ac
			order = append(order, s.Agent)
		}
		ac.ids = append(ac.ids, s.CallIDs...)
		ac.seqs = append(ac.seqs, s.CallSeqs...)
	}
	for _, ac := range by {
		// Already in order (an agent's samples and their calls are);
		// sorted to rely on nothing.
		idx := make([]int, len(ac.seqs))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return ac.seqs[a] - ac.seqs[b] })
		ids, seqs := make([]string, len(idx)), make([]int, len(idx))
		for i, j := range idx {
			ids[i], seqs[i] = ac.ids[j], ac.seqs[j]
		}
		ac.ids, ac.seqs = ids, seqs
	}
	return order, by
}

// creditUnits lays out the values to normalise: one list per group and
// agent (per group only, over all its rollouts, when the group's calls name
// at most one agent and the mode is rollout-level — exactly the pre-agent
// behaviour).
func creditUnits(c CreditConfig, groupOrder []string, groups map[string][]int, get func(int) ([]Sample, RolloutReward)) (units [][]creditUnit, lists [][]float64) {
	rolloutLevel := c.Mode == "" || c.Mode == CreditBroadcast || c.Mode == CreditLastCall
	for _, key := range groupOrder {
		rolls := groups[key]
		by := make([]map[string]*agentCalls, len(rolls))
		var agents []string
		for k, i := range rolls {
			ss, _ := get(i)
			order, m := callsByAgent(ss)
			by[k] = m
			for _, a := range order {
				if !slices.Contains(agents, a) {
					agents = append(agents, a)
				}
			}
		}
		rollUnit := func(k, i int, agent string) (creditUnit, float64) {
			_, rw := get(i)
			u := creditUnit{roll: i, agent: agent, call: -1, last: -1}
			v := rw.Value
			if ac := by[k][agent]; c.Mode == CreditLastCall && ac != nil && len(ac.ids) > 0 {
				u.last = ac.seqs[len(ac.seqs)-1]
				v += rw.CallRewards[ac.ids[len(ac.ids)-1]]
			}
			return u, v
		}
		if rolloutLevel && len(agents) <= 1 {
			agent := ""
			if len(agents) == 1 {
				agent = agents[0]
			}
			var us []creditUnit
			var vs []float64
			for k, i := range rolls {
				u, v := rollUnit(k, i, agent)
				us, vs = append(us, u), append(vs, v)
			}
			units, lists = append(units, us), append(lists, vs)
			continue
		}
		for _, a := range agents {
			var us []creditUnit
			var vs []float64
			for k, i := range rolls {
				ac := by[k][a]
				if ac == nil {
					continue
				}
				if rolloutLevel {
					u, v := rollUnit(k, i, a)
					us, vs = append(us, u), append(vs, v)
					continue
				}
				_, rw := get(i)
				for j, g := range c.callReturns(ac.ids, rw.CallRewards, rw.Value) {
					us = append(us, creditUnit{roll: i, agent: a, call: ac.seqs[j], last: -1})
					vs = append(vs, g)
				}
			}
			units, lists = append(units, us), append(lists, vs)
		}
	}
	return units, lists
}

// maskAllButLast sets loss mask 0 on the response tokens of every call of s
// but the one at position last, recording each masked call as Excluded
// "not_last_call"; it reports whether s still has a trained token.
func maskAllButLast(s *Sample, last int, excl *[]Excluded) bool {
	for k, seq := range s.CallSeqs {
		if seq == last {
			continue
		}
		sp := s.CallSpans[k]
		for t := sp[0]; t < sp[1]; t++ {
			s.LossMask[t] = 0
			s.Logprobs[t] = 0
		}
		*excl = append(*excl, Excluded{RolloutID: s.RolloutID, AttemptID: s.AttemptID, CallID: s.CallIDs[k], Reason: "not_last_call",
			Detail: "credit last_call trains only each agent's final call"})
	}
	return s.Trained() > 0
}

// Dedup drops every call whose agent made a later call of the attempt with
// identical prompt ids (a retry: the last one is kept, as Agent Lightning
// v1.0 does), keeping the order of the rest; it returns the dropped call
// ids. Calls without prompt ids are never duplicates.
func Dedup(calls []api.ModelCall) (kept []api.ModelCall, dropped []string) {
	seen := map[uint64][]int{} // hash → indexes of later calls
	drop := make([]bool, len(calls))
	any := false
	for i := len(calls) - 1; i >= 0; i-- {
		c := &calls[i]
		if len(c.PromptIDs) == 0 {
			continue
		}
		h := promptHash(c.Agent, c.PromptIDs)
		for _, j := range seen[h] {
			if calls[j].Agent == c.Agent && slices.Equal(calls[j].PromptIDs, c.PromptIDs) {
				drop[i], any = true, true
				break
			}
		}
		if !drop[i] {
			seen[h] = append(seen[h], i)
		}
	}
	if !any {
		return calls, nil
	}
	kept = make([]api.ModelCall, 0, len(calls))
	for i := range calls {
		if drop[i] {
			dropped = append(dropped, calls[i].CallID)
			continue
		}
		kept = append(kept, calls[i])
	}
	return kept, dropped
}

// promptHash is FNV-1a over the agent name and the ids.
func promptHash(agent string, ids []int32) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(agent); i++ {
		h = (h ^ uint64(agent[i])) * 1099511628211
	}
	h = (h ^ 0xff) * 1099511628211
	for _, id := range ids {
		h = (h ^ uint64(uint32(id))) * 1099511628211
	}
	return h
}
