// Package samples turns terminal rollouts into training samples: it merges a
// rollout's model calls into as few token sequences as the exact token ids
// allow, resolves rewards, assigns credit to calls (see [Credit]), computes
// advantages within groups,
// assigns per-token loss-aggregation weights, packs samples into batches, and
// holds the plain-Go reference of the policy loss that every trainer backend
// must reproduce. It has no model dependency.
//
// # Calls to samples
//
// The "model_request" events of a rollout's final attempt are read in
// sequence order. Each agent's calls (api.ModelCall.Agent) are merged on
// their own: call k+1 is merged into its agent's current sample when its prompt
// ids start with exactly the current sample's ids (and the other conditions
// of [BuildConfig] hold): the prompt tokens after that prefix are appended
// with loss mask 0, the response tokens with loss mask 1 and their rollout
// log-probs. Otherwise a new sample starts and [Sample.Split] records why
// (see [SplitReason]). The first sample's prompt is masked too, so every
// response token of every kept call lands in exactly one sample with mask 1,
// and a merged sample's ids start with each merged call's prompt+response.
package samples

import (
	"fmt"
	"math"
	"slices"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// SplitReason says why a sample starts a new sequence instead of extending
// the previous one of the same rollout.
type SplitReason string

const (
	// SplitFirst: the first kept call of the attempt.
	SplitFirst SplitReason = "first"
	// SplitMergeOff: merging is disabled (one sample per call).
	SplitMergeOff SplitReason = "merge_off"
	// SplitRerendered: the gateway rendered the prompt from scratch and said
	// why (the call's render_reason, in Split.Detail), and the ids differ.
	SplitRerendered SplitReason = "rerendered"
	// SplitModelVersion: the call was served by a different model version
	// than the current sample's and BuildConfig.MergeAcrossVersions is off.
	SplitModelVersion SplitReason = "model_version"
	// SplitTruncated: the prompt is a strict prefix of the current sample's
	// ids (the history was cut), or the current sample was closed by a
	// response-length truncation.
	SplitTruncated SplitReason = "truncated"
	// SplitMismatch: the prompt differs from the current sample at token
	// Split.At (edited history, a template change the gateway did not flag…).
	SplitMismatch SplitReason = "mismatch"
	// SplitAfterExcluded: the previous call was excluded (no token ids, too
	// long…) and this call's prompt does not extend the current sample.
	SplitAfterExcluded SplitReason = "after_excluded"
)

// Split describes why a sample started.
type Split struct {
	Reason SplitReason `json:"reason"`
	// At is the first index where the prompt differs from the previous
	// sample's ids (SplitMismatch, SplitRerendered), else -1.
	At int `json:"at"`
	// Detail is free text: the render_reason, the two versions, the tokens.
	Detail string `json:"detail,omitempty"`
}

// LengthRule says what happens to a response longer than MaxResponseLen (or a
// call that does not fit MaxSeqLen by itself).
type LengthRule string

const (
	// LengthTruncate keeps the first allowed response tokens (trained, with
	// their log-probs) and removes the rest from the sample; the sample is
	// marked Truncated, counts the removed tokens in TruncatedTokens, and is
	// closed: no later call merges into it.
	LengthTruncate LengthRule = "truncate"
	// LengthDrop excludes the whole call from training (an Excluded record
	// with reason "response_too_long").
	LengthDrop LengthRule = "drop"
)

// BuildConfig controls how calls become samples. The zero value merges,
// splits on model-version change and has no length limits.
type BuildConfig struct {
	// NoMerge makes one sample per call.
	NoMerge bool
	// MergeAcrossVersions lets a call merge into a sample produced by
	// another model version (each token keeps its own behavior log-prob;
	// the sample lists every version). Off by default: a version change
	// starts a new sample (SplitModelVersion).
	MergeAcrossVersions bool
	// MaxPromptLen bounds a call's prompt (0: no limit). A longer prompt is
	// never cut — that would change what the policy conditioned on — the
	// call is excluded ("prompt_too_long").
	MaxPromptLen int
	// MaxResponseLen bounds a call's response (0: no limit); Rule decides.
	MaxResponseLen int
	// MaxSeqLen bounds a sample's total length (0: no limit). A merged
	// sample is exactly as long as its last call's prompt+response, so this
	// is a per-call bound: a response that does not fit after its prompt is
	// handled by Rule; a prompt that leaves no room is excluded.
	MaxSeqLen int
	// Rule applies to over-long responses; "" means LengthTruncate.
	Rule LengthRule
}

// Sample is one token sequence to train on.
type Sample struct {
	RolloutID string `json:"rollout_id"`
	GroupID   string `json:"group_id,omitempty"`
	AttemptID string `json:"attempt_id"`
	// Index is the sample's position among its rollout's samples.
	Index int `json:"index"`
	// CallIDs lists the merged calls in order.
	CallIDs []string `json:"call_ids"`
	// ModelVersions lists the distinct versions that produced the trained
	// tokens, in order of first use.
	ModelVersions []int64 `json:"model_versions"`
	// IDs is the token sequence; LossMask[i] is 1 for a trained response
	// token; Logprobs[i] is that token's rollout (behavior) log-prob
	// log μ(IDs[i] | IDs[:i]), 0 where masked. A trainer computing logits
	// over IDs takes the prediction for position i from the logits at
	// position i−1; IDs[0] is always a masked prompt token.
	IDs      []int32   `json:"ids"`
	LossMask []uint8   `json:"loss_mask"`
	Logprobs []float32 `json:"logprobs"`
	// Weights[i] is the loss-aggregation weight of token i (0 where
	// masked), set by ApplyWeights: loss = Σ_i Weights[i]·ℓ_i.
	Weights []float32 `json:"weights,omitempty"`
	// Agent is the agent whose calls the sample holds ("" for the default
	// agent): a sample never mixes agents.
	Agent string `json:"agent,omitempty"`
	// CallSpans[k] is [start, end) of the response tokens of CallIDs[k] in
	// IDs; CallSeqs[k] its position among the attempt's model calls. Not
	// exported (Row): credit assignment uses them.
	CallSpans [][2]int `json:"-"`
	CallSeqs  []int    `json:"-"`
	// Advantage is the rollout's advantage, broadcast to every trained
	// token — unless credit assignment gave the sample's calls different
	// advantages: then CallAdvantages[k] is the advantage of CallIDs[k]'s
	// response tokens and Advantage the first trained call's.
	Advantage      float64   `json:"advantage"`
	CallAdvantages []float64 `json:"-"`
	// DistillAdvantages[i], when set, is token i's on-policy distillation
	// advantage (see Distill; 0 where masked), added to the RL advantage
	// by TokenAdvantages.
	DistillAdvantages []float64 `json:"-"`
	// Reward is the rollout's primary reward (the fill value when missing).
	Reward        float64 `json:"reward"`
	RewardMissing bool    `json:"reward_missing,omitempty"`
	// CallRewards holds intermediate rewards of merged calls, by call id.
	CallRewards map[string]float64 `json:"call_rewards,omitempty"`
	Split       Split              `json:"split"`
	// Truncated: response tokens were removed by LengthTruncate.
	Truncated       bool `json:"truncated,omitempty"`
	TruncatedTokens int  `json:"truncated_tokens,omitempty"`
}

// Trained returns the number of tokens with loss mask 1.
func (s *Sample) Trained() int {
	n := 0
	for _, m := range s.LossMask {
		n += int(m)
	}
	return n
}

// TokenAdvantages returns the per-token advantages: Advantage (or the
// token's call's CallAdvantages entry), plus the token's
// DistillAdvantages entry when set, where the loss mask is 1, 0
// elsewhere, as float32 — saturated at ±math.MaxFloat32, so that a finite
// advantage beyond float32's range (unnormalised estimators on huge
// rewards) stays finite.
func (s *Sample) TokenAdvantages() []float32 {
	adv := make([]float64, len(s.IDs))
	for i, m := range s.LossMask {
		if m != 0 {
			adv[i] = s.Advantage
		}
	}
	if len(s.CallAdvantages) == len(s.CallSpans) {
		for k, sp := range s.CallSpans {
			for i := sp[0]; i < sp[1] && i < len(adv); i++ {
				if s.LossMask[i] != 0 {
					adv[i] = s.CallAdvantages[k]
				}
			}
		}
	}
	if len(s.DistillAdvantages) == len(adv) {
		for i, m := range s.LossMask {
			if m != 0 {
				adv[i] += s.DistillAdvantages[i]
			}
		}
	}
	out := make([]float32, len(adv))
	for i, a := range adv {
		out[i] = float32(max(-math.MaxFloat32, min(math.MaxFloat32, a)))
	}
	return out
}

// Excluded records a call that does not train (under RL).
type Excluded struct {
	RolloutID string `json:"rollout_id"`
	AttemptID string `json:"attempt_id"`
	CallID    string `json:"call_id"`
	// Reason: "no_token_ids", "logprobs_mismatch", "prompt_too_long",
	// "response_too_long", "no_trained_tokens", "empty_prompt", "bad_event";
	// from FromRollouts also "duplicate_prompt" (a later call of the agent
	// had the same prompt ids), "frozen_agent" (not in TrainAgents) and
	// "not_last_call" (CreditLastCall: its tokens stay in the sample, masked).
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// FinalAttempt returns the attempt whose calls train: the highest-numbered
// attempt in r.Attempts when present, else the attempt of the last event in
// sequence order (attempts of a rollout run one after another).
func FinalAttempt(r store.Rollout, events []store.Event) string {
	best, num := "", -1
	for _, a := range r.Attempts {
		if a.Number > num {
			best, num = a.ID, a.Number
		}
	}
	if best != "" {
		return best
	}
	var last int64 = -1
	for _, e := range events {
		if e.Seq > last {
			last, best = e.Seq, e.AttemptID
		}
	}
	return best
}

// Calls decodes the "model_request" events of one attempt, sorted by Seq.
// Events that do not decode come back as Excluded records ("bad_event").
// Records of refused or failed calls (api.CallError) are left out: they
// hold no tokens and break no conversation.
func Calls(events []store.Event, attemptID string) ([]api.ModelCall, []Excluded) {
	evs := make([]store.Event, 0, len(events))
	for _, e := range events {
		if e.Type == store.EventModelRequest && e.AttemptID == attemptID {
			evs = append(evs, e)
		}
	}
	slices.SortStableFunc(evs, func(a, b store.Event) int { return cmpInt64(a.Seq, b.Seq) })
	calls := make([]api.ModelCall, 0, len(evs))
	var bad []Excluded
	for _, e := range evs {
		c, err := decodeCall(e.Data)
		if err != nil {
			bad = append(bad, Excluded{RolloutID: e.RolloutID, AttemptID: e.AttemptID,
				Reason: "bad_event", Detail: fmt.Sprintf("event %d: %v", e.Seq, err)})
			continue
		}
		if c.Status == api.CallError {
			continue
		}
		calls = append(calls, c)
	}
	return calls, bad
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Build turns one attempt's calls (in order) into samples. rolloutID,
// groupID and attemptID are copied into every sample and record. Rewards,
// advantages and weights are left zero.
func Build(cfg BuildConfig, rolloutID, groupID, attemptID string, calls []api.ModelCall) ([]Sample, []Excluded) {
	rule := cfg.Rule
	if rule == "" {
		rule = LengthTruncate
	}
	// Each agent's calls form their own conversation: a call merges only
	// into the open sample of its own agent.
	type agentState struct {
		cur           int  // index in out of the sample a call may merge into; -1 when closed
		lastExcl      bool // the agent's previous call was excluded
		closedByTrunc bool
		any           bool // the agent has a sample
	}
	var (
		out    []Sample
		excl   []Excluded
		agents = map[string]*agentState{}
	)
	var as *agentState
	exclude := func(c *api.ModelCall, reason, detail string) {
		excl = append(excl, Excluded{RolloutID: rolloutID, AttemptID: attemptID, CallID: c.CallID, Reason: reason, Detail: detail})
		as.lastExcl = true
	}
	for i := range calls {
		c := &calls[i]
		if as = agents[c.Agent]; as == nil {
			as = &agentState{cur: -1}
			agents[c.Agent] = as
		}
		switch {
		case c.NoTokenIDs || len(c.ResponseIDs) == 0 && len(c.PromptIDs) == 0:
			exclude(c, "no_token_ids", "upstream returned no token ids; usable for SFT only")
			continue
		case len(c.PromptIDs) == 0:
			exclude(c, "empty_prompt", "a response without context cannot be scored")
			continue
		case len(c.ResponseLogprobs) != len(c.ResponseIDs):
			exclude(c, "logprobs_mismatch", fmt.Sprintf("%d response ids, %d log-probs", len(c.ResponseIDs), len(c.ResponseLogprobs)))
			continue
		case cfg.MaxPromptLen > 0 && len(c.PromptIDs) > cfg.MaxPromptLen:
			exclude(c, "prompt_too_long", fmt.Sprintf("prompt %d > %d", len(c.PromptIDs), cfg.MaxPromptLen))
			continue
		case cfg.MaxSeqLen > 0 && len(c.PromptIDs) >= cfg.MaxSeqLen:
			exclude(c, "prompt_too_long", fmt.Sprintf("prompt %d leaves no room in max_seq_len %d", len(c.PromptIDs), cfg.MaxSeqLen))
			continue
		}
		// How many response tokens this call may keep as a fresh sample.
		keep := len(c.ResponseIDs)
		if cfg.MaxResponseLen > 0 && keep > cfg.MaxResponseLen {
			keep = cfg.MaxResponseLen
		}
		if cfg.MaxSeqLen > 0 && len(c.PromptIDs)+keep > cfg.MaxSeqLen {
			keep = cfg.MaxSeqLen - len(c.PromptIDs)
		}
		if keep < len(c.ResponseIDs) && rule == LengthDrop {
			exclude(c, "response_too_long", fmt.Sprintf("response %d tokens, %d allowed", len(c.ResponseIDs), keep))
			continue
		}

		// Decide between merging and starting anew.
		split := Split{Reason: SplitFirst, At: -1}
		merge := false
		var cur *Sample
		if as.cur >= 0 {
			cur = &out[as.cur]
			split = classify(cfg, cur, c, as.lastExcl)
			merge = split.Reason == ""
		} else if as.any {
			if as.closedByTrunc {
				split = Split{Reason: SplitTruncated, At: -1, Detail: "previous sample's response was truncated"}
			} else if as.lastExcl {
				split = Split{Reason: SplitAfterExcluded, At: -1}
			}
		}
		if cfg.NoMerge && as.any {
			split = Split{Reason: SplitMergeOff, At: -1}
			merge = false
		}
		as.lastExcl = false
		as.closedByTrunc = false

		if merge {
			// Merge: keep is len(ResponseIDs) here unless MaxResponseLen cut it.
			n0 := len(cur.IDs)
			gap := c.PromptIDs[n0:]
			cur.IDs = append(cur.IDs, gap...)
			cur.LossMask = append(cur.LossMask, make([]uint8, len(gap))...)
			cur.Logprobs = append(cur.Logprobs, make([]float32, len(gap))...)
			appendResponse(cur, c, keep)
			cur.CallIDs = append(cur.CallIDs, c.CallID)
			cur.CallSeqs = append(cur.CallSeqs, i)
			if !slices.Contains(cur.ModelVersions, c.ModelVersion) {
				cur.ModelVersions = append(cur.ModelVersions, c.ModelVersion)
			}
		} else {
			s := Sample{
				RolloutID: rolloutID, GroupID: groupID, AttemptID: attemptID, Agent: c.Agent,
				Index: len(out), CallIDs: []string{c.CallID}, ModelVersions: []int64{c.ModelVersion},
				Split: split, CallSeqs: []int{i},
			}
			n := len(c.PromptIDs) + keep
			s.IDs = make([]int32, 0, n)
			s.IDs = append(s.IDs, c.PromptIDs...)
			s.LossMask = make([]uint8, len(c.PromptIDs), n)
			s.Logprobs = make([]float32, len(c.PromptIDs), n)
			appendResponse(&s, c, keep)
			out = append(out, s)
			as.cur, as.any = len(out)-1, true
			cur = &out[as.cur]
		}
		if keep < len(c.ResponseIDs) {
			cur.Truncated = true
			cur.TruncatedTokens += len(c.ResponseIDs) - keep
			as.cur = -1
			as.closedByTrunc = true
		}
	}
	// A sample with no trained token (calls with empty responses that
	// nothing later extended) would only cost compute.
	kept := out[:0]
	for _, s := range out {
		if s.Trained() == 0 {
			for _, id := range s.CallIDs {
				excl = append(excl, Excluded{RolloutID: rolloutID, AttemptID: attemptID, CallID: id, Reason: "no_trained_tokens",
					Detail: "empty response, not extended by a later call"})
			}
			continue
		}
		s.Index = len(kept)
		kept = append(kept, s)
	}
	return kept, excl
}

func appendResponse(s *Sample, c *api.ModelCall, keep int) {
	s.CallSpans = append(s.CallSpans, [2]int{len(s.IDs), len(s.IDs) + keep})
	s.IDs = append(s.IDs, c.ResponseIDs[:keep]...)
	for range keep {
		s.LossMask = append(s.LossMask, 1)
	}
	s.Logprobs = append(s.Logprobs, c.ResponseLogprobs[:keep]...)
}

// classify returns the zero Split (Reason "") when c may merge into cur, else
// why not.
func classify(cfg BuildConfig, cur *Sample, c *api.ModelCall, lastExcl bool) Split {
	ids := cur.IDs
	p := c.PromptIDs
	n := min(len(ids), len(p))
	at := -1
	for i := 0; i < n; i++ {
		if ids[i] != p[i] {
			at = i
			break
		}
	}
	if at < 0 && len(p) >= len(ids) {
		// Exact prefix: merge unless the version changed.
		last := cur.ModelVersions[len(cur.ModelVersions)-1]
		if !cfg.MergeAcrossVersions && c.ModelVersion != last {
			return Split{Reason: SplitModelVersion, At: -1, Detail: fmt.Sprintf("version %d after %d", c.ModelVersion, last)}
		}
		return Split{}
	}
	if at < 0 {
		// p is a strict prefix of ids: the history was cut.
		return Split{Reason: SplitTruncated, At: len(p), Detail: fmt.Sprintf("prompt of %d tokens is a strict prefix of the %d-token sample", len(p), len(ids))}
	}
	last := cur.ModelVersions[len(cur.ModelVersions)-1]
	detail := fmt.Sprintf("prompt[%d]=%d, sample[%d]=%d", at, p[at], at, ids[at])
	switch {
	case c.ModelVersion != last && !cfg.MergeAcrossVersions:
		return Split{Reason: SplitModelVersion, At: at, Detail: fmt.Sprintf("version %d after %d; %s", c.ModelVersion, last, detail)}
	case !c.Continued && c.RenderReason != "" && c.RenderReason != "first_call":
		return Split{Reason: SplitRerendered, At: at, Detail: c.RenderReason + "; " + detail}
	case lastExcl:
		return Split{Reason: SplitAfterExcluded, At: at, Detail: detail}
	}
	return Split{Reason: SplitMismatch, At: at, Detail: detail}
}
