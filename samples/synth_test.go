package samples

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// synthOpts shapes a synthetic multi-turn tool-use rollout.
type synthOpts struct {
	turns                    int
	sysLen, userLen          int
	respLen, toolLen         int // mean lengths (±50%)
	pRerender, pEdit, pTrunc float64
	pVersion, pNoIDs, pBadLP float64
	version                  int64
	vocab                    int32
}

func jitter(rng *rand.Rand, mean int) int {
	if mean <= 1 {
		return mean
	}
	return mean/2 + rng.IntN(mean+1)
}

func randToks(rng *rand.Rand, n int, vocab int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = rng.Int32N(vocab)
	}
	return out
}

// synthCalls simulates what the gateway records for one attempt: each turn's
// prompt normally extends the previous prompt+response with a tool result
// (continued); with the given probabilities the history is re-rendered (a
// token early in the prompt changes, render_reason set), silently edited, cut
// (truncated to a prefix), served by a new model version, or served without
// token ids.
func synthCalls(rng *rand.Rand, o synthOpts) []api.ModelCall {
	if o.vocab == 0 {
		o.vocab = 32000
	}
	ver := o.version
	ctx := randToks(rng, jitter(rng, o.sysLen)+jitter(rng, o.userLen), o.vocab)
	calls := make([]api.ModelCall, 0, o.turns)
	for k := 0; k < o.turns; k++ {
		c := api.ModelCall{CallID: fmt.Sprintf("call-%d", k), API: api.ShapeChatCompletions, Model: "m", Continued: k > 0}
		if k == 0 {
			c.RenderReason = "first_call"
		}
		if k > 0 {
			switch u := rng.Float64(); {
			case u < o.pRerender:
				ctx = slices.Clone(ctx)
				ctx[rng.IntN(len(ctx))] ^= 1
				c.Continued, c.RenderReason = false, "history_rewritten"
			case u < o.pRerender+o.pEdit:
				ctx = slices.Clone(ctx)
				ctx[rng.IntN(len(ctx))] ^= 1
				c.Continued = false
			case u < o.pRerender+o.pEdit+o.pTrunc:
				ctx = slices.Clone(ctx[:1+rng.IntN(len(ctx)-1)])
				c.Continued, c.RenderReason = false, "context_truncated"
			case u < o.pRerender+o.pEdit+o.pTrunc+o.pVersion:
				ver++
			}
		}
		c.ModelVersion = ver
		resp := randToks(rng, 1+jitter(rng, o.respLen), o.vocab)
		c.PromptIDs = slices.Clone(ctx)
		c.ResponseIDs = resp
		c.ResponseLogprobs = make([]float32, len(resp))
		for i := range resp {
			c.ResponseLogprobs[i] = -rng.Float32() * 5
		}
		if rng.Float64() < o.pNoIDs {
			c.NoTokenIDs, c.PromptIDs, c.ResponseIDs, c.ResponseLogprobs = true, nil, nil, nil
		} else if rng.Float64() < o.pBadLP {
			c.ResponseLogprobs = c.ResponseLogprobs[:len(resp)-1]
		}
		c.Usage = api.Usage{PromptTokens: len(c.PromptIDs), CompletionTokens: len(c.ResponseIDs)}
		calls = append(calls, c)
		// Next context: this prompt + response + a tool result.
		ctx = append(append(slices.Clone(ctx), resp...), randToks(rng, jitter(rng, o.toolLen), o.vocab)...)
	}
	return calls
}

// toEvents encodes calls and a final reward as stored events of one attempt.
func toEvents(t testing.TB, seq *int64, rolloutID, attemptID string, calls []api.ModelCall, reward *float64) []store.Event {
	var evs []store.Event
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range calls {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		*seq++
		evs = append(evs, store.Event{Seq: *seq, RolloutID: rolloutID, AttemptID: attemptID, Type: store.EventModelRequest, Time: at, Data: b})
	}
	if reward != nil {
		b, _ := json.Marshal(store.Reward{Value: reward})
		*seq++
		evs = append(evs, store.Event{Seq: *seq, RolloutID: rolloutID, AttemptID: attemptID, Type: store.EventReward, Time: at, Data: b})
	}
	return evs
}

// synthStep builds groups×perGroup terminal rollouts with events.
func synthStep(t testing.TB, rng *rand.Rand, groups, perGroup int, o synthOpts) ([]store.Rollout, map[string][]store.Event) {
	var rs []store.Rollout
	evs := map[string][]store.Event{}
	var seq int64
	for g := 0; g < groups; g++ {
		for k := 0; k < perGroup; k++ {
			id := fmt.Sprintf("r%d-%d", g, k)
			r := store.Rollout{ID: id, GroupID: fmt.Sprintf("g%d", g), Mode: store.ModeTrain, Status: store.RolloutSucceeded}
			rew := float64(rng.IntN(2))
			evs[id] = toEvents(t, &seq, id, id+"-a1", synthCalls(rng, o), &rew)
			rs = append(rs, r)
		}
	}
	return rs, evs
}

// tokenUse is the number of tokens a trainer processes for samples.
func tokenUse(ss []Sample) int {
	n := 0
	for i := range ss {
		n += len(ss[i].IDs)
	}
	return n
}

// checkInvariants verifies, for one attempt's calls and the samples and
// exclusions built from them: every response token of every kept call
// appears in exactly one sample with mask 1 and its rollout log-prob; each
// merged call's prompt+response is a prefix of its sample's ids; masked
// positions carry log-prob 0; exclusions account for the other calls.
func checkInvariants(t *testing.T, cfg BuildConfig, calls []api.ModelCall, ss []Sample, excl []Excluded) {
	t.Helper()
	byID := map[string]*api.ModelCall{}
	for i := range calls {
		byID[calls[i].CallID] = &calls[i]
	}
	seen := map[string]bool{}
	for _, e := range excl {
		if seen[e.CallID] {
			t.Fatalf("call %s excluded twice", e.CallID)
		}
		seen[e.CallID] = true
	}
	for si := range ss {
		s := &ss[si]
		if len(s.IDs) != len(s.LossMask) || len(s.IDs) != len(s.Logprobs) {
			t.Fatalf("sample %d: lengths %d/%d/%d", si, len(s.IDs), len(s.LossMask), len(s.Logprobs))
		}
		want := make([]uint8, len(s.IDs))
		for k, id := range s.CallIDs {
			c := byID[id]
			if c == nil || seen[id] {
				t.Fatalf("sample %d: call %q unknown or in two places", si, id)
			}
			seen[id] = true
			resp := c.ResponseIDs
			lps := c.ResponseLogprobs
			last := k == len(s.CallIDs)-1
			if last && s.Truncated {
				kept := len(s.IDs) - len(c.PromptIDs)
				if kept+s.TruncatedTokens != len(resp) {
					t.Fatalf("sample %d: kept %d + truncated %d != response %d", si, kept, s.TruncatedTokens, len(resp))
				}
				resp, lps = resp[:kept], lps[:kept]
			}
			full := append(slices.Clone(c.PromptIDs), resp...)
			if len(full) > len(s.IDs) || !slices.Equal(s.IDs[:len(full)], full) {
				t.Fatalf("sample %d: call %s prompt+response is not a prefix of the sample", si, id)
			}
			if last && len(full) != len(s.IDs) {
				t.Fatalf("sample %d: last call %s ends at %d, sample at %d", si, id, len(full), len(s.IDs))
			}
			for j := range resp {
				p := len(c.PromptIDs) + j
				want[p] = 1
				if s.Logprobs[p] != lps[j] {
					t.Fatalf("sample %d pos %d: logprob %v, call %s had %v", si, p, s.Logprobs[p], id, lps[j])
				}
			}
		}
		if !slices.Equal(s.LossMask, want) {
			t.Fatalf("sample %d: loss mask is not exactly the union of its calls' responses", si)
		}
		for p, m := range s.LossMask {
			if m == 0 && s.Logprobs[p] != 0 {
				t.Fatalf("sample %d pos %d: masked token with log-prob %v", si, p, s.Logprobs[p])
			}
		}
	}
	for _, c := range calls {
		if !seen[c.CallID] {
			t.Fatalf("call %s neither in a sample nor excluded", c.CallID)
		}
	}
}

func TestPropertyRandomRollouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cfgs := []BuildConfig{
		{},
		{NoMerge: true},
		{MergeAcrossVersions: true},
		{MaxResponseLen: 12, Rule: LengthTruncate},
		{MaxResponseLen: 12, Rule: LengthDrop, MaxPromptLen: 300},
		{MaxSeqLen: 200},
	}
	o := synthOpts{turns: 8, sysLen: 20, userLen: 10, respLen: 12, toolLen: 15,
		pRerender: 0.1, pEdit: 0.05, pTrunc: 0.05, pVersion: 0.1, pNoIDs: 0.05, pBadLP: 0.03, version: 3}
	for ci, cfg := range cfgs {
		for iter := 0; iter < 300; iter++ {
			calls := synthCalls(rng, o)
			ss, excl := Build(cfg, "r", "g", "a", calls)
			t.Run("", func(t *testing.T) {
				checkInvariants(t, cfg, calls, ss, excl)
			})
			if t.Failed() {
				t.Fatalf("config %d iteration %d failed", ci, iter)
			}
			// Without limits, every response token is trained exactly once.
			if cfg.MaxResponseLen == 0 && cfg.MaxSeqLen == 0 {
				want := 0
				for _, c := range calls {
					if !c.NoTokenIDs && len(c.ResponseLogprobs) == len(c.ResponseIDs) {
						want += len(c.ResponseIDs)
					}
				}
				got := 0
				for i := range ss {
					got += ss[i].Trained()
				}
				if got != want {
					t.Fatalf("config %d: %d trained tokens, want %d", ci, got, want)
				}
			}
			if cfg.NoMerge && len(ss)+len(excl) != len(calls) {
				t.Fatalf("merge off: %d samples + %d excluded != %d calls", len(ss), len(excl), len(calls))
			}
			if !cfg.MergeAcrossVersions {
				for i := range ss {
					if len(ss[i].ModelVersions) != 1 {
						t.Fatalf("sample mixes versions %v", ss[i].ModelVersions)
					}
				}
			}
			if cfg.MaxSeqLen > 0 {
				for i := range ss {
					if len(ss[i].IDs) > cfg.MaxSeqLen {
						t.Fatalf("sample of %d tokens > max %d", len(ss[i].IDs), cfg.MaxSeqLen)
					}
				}
			}
		}
	}
}

// A clean multi-turn rollout (every prompt extends the last) is one sample.
func TestPropertyCleanRolloutIsOneSample(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 100; iter++ {
		calls := synthCalls(rng, synthOpts{turns: 1 + rng.IntN(10), sysLen: 10, userLen: 5, respLen: 8, toolLen: 6})
		ss, excl := Build(BuildConfig{}, "r", "g", "a", calls)
		if len(ss) != 1 || len(excl) != 0 {
			t.Fatalf("%d calls → %d samples, %d excluded; want 1, 0", len(calls), len(ss), len(excl))
		}
		checkInvariants(t, BuildConfig{}, calls, ss, excl)
	}
}

func TestPropertyRolloutMeanAndGRPO(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	o := synthOpts{turns: 6, sysLen: 20, userLen: 10, respLen: 12, toolLen: 15, pRerender: 0.2, pTrunc: 0.1, pVersion: 0.1}
	for iter := 0; iter < 30; iter++ {
		rs, evs := synthStep(t, rng, 1+rng.IntN(5), 2+rng.IntN(6), o)
		res, err := FromRollouts(rs, evs, Config{Advantage: AdvantageConfig{Estimator: GRPO}, Aggregation: RolloutMean})
		if err != nil {
			t.Fatal(err)
		}
		// rollout-mean: Σ weights per rollout = 1/R; times R (undoing the
		// batch normalization) = 1.
		per := map[string]float64{}
		adv := map[string]float64{}
		group := map[string]string{}
		for i := range res.Samples {
			s := &res.Samples[i]
			for _, w := range s.Weights {
				per[s.RolloutID] += float64(w)
			}
			if a, ok := adv[s.RolloutID]; ok && a != s.Advantage {
				t.Fatalf("rollout %s has two advantages %v, %v", s.RolloutID, a, s.Advantage)
			}
			adv[s.RolloutID] = s.Advantage
			group[s.RolloutID] = s.GroupID
		}
		R := float64(len(per))
		for id, w := range per {
			if d := w*R - 1; d > 1e-5 || d < -1e-5 {
				t.Fatalf("rollout %s: total weight×R = %v, want 1", id, w*R)
			}
		}
		// GRPO: advantages of every group sum to 0.
		sum := map[string]float64{}
		for id, a := range adv {
			sum[group[id]] += a
		}
		for g, s := range sum {
			if s > 1e-9 || s < -1e-9 {
				t.Fatalf("group %s: advantages sum to %v", g, s)
			}
		}
	}
}
