package samples

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// creditRollout is one rollout of the credit tables: calls in order (agent
// per call; each agent's second call extends its first, so they merge),
// the final reward R and per-call rewards r by call index.
type creditRollout struct {
	id       string
	agents   []string
	outcome  float64
	callRews map[int]float64
}

// creditStep makes the rollouts and events: call k of rollout X is "X{k}",
// with a 2-token response for an agent's first call and 1 token after.
func creditStep(t *testing.T, rs []creditRollout) ([]store.Rollout, map[string][]store.Event) {
	var seq int64
	var out []store.Rollout
	evs := map[string][]store.Event{}
	for _, r := range rs {
		out = append(out, store.Rollout{ID: r.id, GroupID: "g", Status: store.RolloutSucceeded, Mode: store.ModeTrain})
		prev := map[string][]int32{}
		var calls []api.ModelCall
		for k, a := range r.agents {
			var c api.ModelCall
			if p, ok := prev[a]; ok {
				c = call(fmt.Sprintf("%s%d", r.id, k), 1, cat(p, []int32{90}), []int32{int32(50 + k)})
			} else {
				base := []int32{10, int32(20 + len(prev))}
				c = call(fmt.Sprintf("%s%d", r.id, k), 1, base, []int32{int32(30 + k), int32(40 + k)})
			}
			c.Agent = a
			prev[a] = cat(c.PromptIDs, c.ResponseIDs)
			calls = append(calls, c)
		}
		f := r.outcome
		evs[r.id] = toEvents(t, &seq, r.id, r.id+"-a1", calls, &f)
		// Per-call rewards arrive after the outcome: they add to it, they
		// never replace it.
		for _, k := range slices.Sorted(mapsKeys(r.callRews)) {
			v := r.callRews[k]
			b, _ := json.Marshal(store.Reward{Value: &v, CallID: fmt.Sprintf("%s%d", r.id, k)})
			seq++
			evs[r.id] = append(evs[r.id], store.Event{Seq: seq, RolloutID: r.id, AttemptID: r.id + "-a1", Type: store.EventReward, Data: b})
		}
	}
	return out, evs
}

func mapsKeys(m map[int]float64) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestCreditHandTable: every credit mode against hand-computed returns
// and advantages (Dr. GRPO: A = G − mean of the unit list, so each figure
// below is checkable by hand). want maps call id → the advantage of its
// trained response tokens; a call absent from want trains no token.
func TestCreditHandTable(t *testing.T) {
	sd := math.Sqrt(2.046875 / 3)
	// Two rollouts of one agent, two calls each (merged into one sample):
	// R_A = 1, R_B = 0; r(A0) = 0.5, r(B1) = −0.25.
	one := []creditRollout{
		{"A", []string{"w", "w"}, 1, map[int]float64{0: 0.5}},
		{"B", []string{"w", "w"}, 0, map[int]float64{1: -0.25}},
	}
	tests := []struct {
		name   string
		rs     []creditRollout
		credit CreditConfig
		est    Estimator
		want   map[string]float64
		masked []string // calls excluded as not_last_call
	}{
		// Units are rollouts: [1, 0] → ±0.5; per-call rewards not used.
		{"broadcast", one, CreditConfig{Mode: CreditBroadcast}, DrGRPO,
			map[string]float64{"A0": .5, "A1": .5, "B0": -.5, "B1": -.5}, nil},
		// G = R + r: A0 1.5, A1 1, B0 0, B1 −0.25; mean 0.5625.
		{"per_call", one, CreditConfig{Mode: CreditPerCall}, DrGRPO,
			map[string]float64{"A0": .9375, "A1": .4375, "B0": -.5625, "B1": -.8125}, nil},
		// γ = 0.5: G_A1 = 0 + 1 = 1, G_A0 = 0.5 + 0.5·1 = 1;
		// G_B1 = −0.25 + 0 = −0.25, G_B0 = 0 + 0.5·(−0.25) = −0.125; mean 0.40625.
		{"discounted", one, CreditConfig{Mode: CreditDiscounted, Gamma: 0.5}, DrGRPO,
			map[string]float64{"A0": .59375, "A1": .59375, "B0": -.53125, "B1": -.65625}, nil},
		// γ = 1 (0 means 1): G_A0 = 0.5 + 1 = 1.5, G_A1 = 1; G_B0 = G_B1 = −0.25; mean 0.5.
		{"discounted gamma 1", one, CreditConfig{Mode: CreditDiscounted}, DrGRPO,
			map[string]float64{"A0": 1, "A1": .5, "B0": -.75, "B1": -.75}, nil},
		// Only the last call: G_A = 1 + 0, G_B = 0 − 0.25; mean 0.375.
		{"last_call", one, CreditConfig{Mode: CreditLastCall}, DrGRPO,
			map[string]float64{"A1": .625, "B1": -.625}, []string{"A0", "B0"}},
		// GRPO over the per-call returns 1.5, 1, 0, −0.25: mean 0.5625,
		// sample std σ = sqrt((0.87890625+0.19140625+0.31640625+0.66015625)/3)
		// = sqrt(2.046875/3) = 0.82601; A = (G − mean)/(σ + 1e-6).
		{"per_call grpo", one, CreditConfig{Mode: CreditPerCall}, GRPO,
			map[string]float64{"A0": .9375 / (sd + 1e-6), "A1": .4375 / (sd + 1e-6), "B0": -.5625 / (sd + 1e-6), "B1": -.8125 / (sd + 1e-6)}, nil},
		// Two agents, normalised per agent: w's per-call returns [1, 0]
		// → ±0.5; c's [1 + 1, 0] → ±1.
		{"per_call two agents", []creditRollout{
			{"A", []string{"w", "c"}, 1, map[int]float64{1: 1}},
			{"B", []string{"w", "c"}, 0, nil},
		}, CreditConfig{Mode: CreditPerCall}, DrGRPO,
			map[string]float64{"A0": .5, "A1": 1, "B0": -.5, "B1": -1}, nil},
		// Broadcast per agent: w over both rollouts [1, 0]; c only in A
		// (a group of one: advantage 0). Interleaved calls of two agents
		// still merge per agent (A0+A2, A1+A3).
		{"broadcast two agents", []creditRollout{
			{"A", []string{"w", "c", "w", "c"}, 1, nil},
			{"B", []string{"w", "w"}, 0, nil},
		}, CreditConfig{}, DrGRPO,
			map[string]float64{"A0": .5, "A2": .5, "A1": 0, "A3": 0, "B0": -.5, "B1": -.5}, nil},
		// last_call per agent: A's w ends at A2, c at A3.
		{"last_call two agents", []creditRollout{
			{"A", []string{"w", "c", "w", "c"}, 1, map[int]float64{3: 1}},
			{"B", []string{"w", "c"}, 0, nil},
		}, CreditConfig{Mode: CreditLastCall}, DrGRPO,
			map[string]float64{"A2": .5, "B0": -.5, "A3": 1, "B1": -1}, []string{"A0", "A1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, evs := creditStep(t, tc.rs)
			res, err := FromRollouts(rs, evs, Config{Credit: tc.credit, Advantage: AdvantageConfig{Estimator: tc.est}, Aggregation: DefaultAggregation})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, s := range res.Samples {
				adv := s.TokenAdvantages()
				if len(s.CallIDs) != len(s.CallSpans) {
					t.Fatalf("sample %s/%d: %d calls, %d spans", s.RolloutID, s.Index, len(s.CallIDs), len(s.CallSpans))
				}
				for k, id := range s.CallIDs {
					sp := s.CallSpans[k]
					for i := sp[0]; i < sp[1]; i++ {
						if s.LossMask[i] == 0 {
							continue
						}
						if prev, ok := got[id]; ok && prev != float64(adv[i]) {
							t.Errorf("call %s: tokens with advantages %v and %v", id, prev, adv[i])
						}
						got[id] = float64(adv[i])
					}
				}
				// Every sample holds one agent's calls only.
				for _, id := range s.CallIDs {
					k := int(id[1] - '0')
					for _, r := range tc.rs {
						if r.id == s.RolloutID && r.agents[k] != s.Agent {
							t.Errorf("sample of agent %q holds call %s of agent %q", s.Agent, id, r.agents[k])
						}
					}
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("trained calls %v, want %v", got, tc.want)
			}
			// An agent's calls merge into one sample, interleaved or not.
			pairs := map[string]bool{}
			for _, r := range tc.rs {
				for _, a := range r.agents {
					pairs[r.id+"/"+a] = true
				}
			}
			if len(res.Samples) != len(pairs) {
				t.Errorf("%d samples, want one per rollout and agent (%d)", len(res.Samples), len(pairs))
			}
			for id, w := range tc.want {
				if g, ok := got[id]; !ok || !near(g, w, 1e-5) {
					t.Errorf("call %s: advantage %v, want %v (all: %v)", id, g, w, got)
				}
			}
			var masked []string
			for _, e := range res.Excluded {
				if e.Reason == "not_last_call" {
					masked = append(masked, e.CallID)
				}
			}
			slices.Sort(masked)
			if !reflect.DeepEqual(masked, tc.masked) {
				t.Errorf("masked calls %v, want %v", masked, tc.masked)
			}
			// Exported and read back, the per-token advantages survive.
			var buf strings.Builder
			if err := WriteJSONL(&buf, res.Samples); err != nil {
				t.Fatal(err)
			}
			back, err := ReadJSONL(strings.NewReader(buf.String()))
			if err != nil {
				t.Fatal(err)
			}
			for i := range back {
				if !reflect.DeepEqual(back[i].TokenAdvantages(), res.Samples[i].TokenAdvantages()) || back[i].Agent != res.Samples[i].Agent {
					t.Errorf("sample %d: advantages or agent changed through JSONL", i)
				}
			}
		})
	}
}

// TestValidateNames: unknown estimator, aggregation, credit and length
// rule names and bad agent names are refused with a message naming them.
func TestValidateNames(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string // "" for valid
	}{
		{Config{}, ""},
		{Config{Advantage: AdvantageConfig{Estimator: DrGRPO}, Aggregation: TokenMean, Credit: CreditConfig{Mode: CreditDiscounted, Gamma: 0.9}, TrainAgents: []string{"w", ""}}, ""},
		{Config{Advantage: AdvantageConfig{Estimator: "drgrpo"}}, `"drgrpo"`},
		{Config{Aggregation: "mean"}, `"mean"`},
		{Config{Credit: CreditConfig{Mode: "per-call"}}, `"per-call"`},
		{Config{Credit: CreditConfig{Mode: CreditDiscounted, Gamma: 1.5}}, "gamma"},
		{Config{Credit: CreditConfig{Mode: CreditPerCall}, Reward: RewardConfig{AddCallRewards: true}}, "add_call_rewards"},
		{Config{TrainAgents: []string{"bad name"}}, "train_agents"},
		{Config{Build: BuildConfig{Rule: "cut"}}, `"cut"`},
		{Config{Build: BuildConfig{MaxSeqLen: -1}}, "negative"},
	}
	for _, tc := range tests {
		err := tc.cfg.ValidateNames()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestDedup: of calls with identical prompt ids (same agent), the last is
// kept; other agents' identical prompts are not duplicates.
func TestDedup(t *testing.T) {
	p := []int32{1, 2, 3}
	mk := func(id, agent string, prompt []int32) api.ModelCall {
		c := call(id, 1, prompt, []int32{9})
		c.Agent = agent
		return c
	}
	calls := []api.ModelCall{mk("a", "", p), mk("b", "", []int32{1, 2}), mk("c", "", p), mk("d", "x", p), mk("e", "", p), mk("f", "", nil), mk("g", "", nil)}
	kept, dropped := Dedup(calls)
	var ids []string
	for _, c := range kept {
		ids = append(ids, c.CallID)
	}
	if !reflect.DeepEqual(ids, []string{"b", "d", "e", "f", "g"}) || !reflect.DeepEqual(dropped, []string{"a", "c"}) {
		t.Fatalf("kept %v dropped %v", ids, dropped)
	}
	// Through the pipeline: counted and excluded.
	var seq int64
	f := 1.0
	rs := []store.Rollout{{ID: "r", Status: store.RolloutSucceeded}}
	res, err := FromRollouts(rs, map[string][]store.Event{"r": toEvents(t, &seq, "r", "r-a1", calls[:3], &f)}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.Duplicates != 1 || res.Stats.Excluded["duplicate_prompt"] != 1 || res.Stats.Calls != 3 {
		t.Fatalf("stats %+v", res.Stats)
	}
}
