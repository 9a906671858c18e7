package samples

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/sqlite"
)

// sftRollout is one stored rollout of TestSFTSamples: its mode, metadata,
// reward (nil: none) and calls; cancel leaves it cancelled, unclaimed.
type sftRollout struct {
	id     string
	mode   store.Mode
	meta   string
	reward *float64
	calls  []api.ModelCall
	cancel bool
}

// TestSFTSamples fills a real SQLite store (claim → events → complete)
// and selects from it: merged calls with their recorded loss masks, the
// filters (reward, mode, steps, agent, policy) each counted, a retried
// call and a transcript stored twice trained once, a call without ids
// left out, and an empty selection explained.
func TestSFTSamples(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agl.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	one, zero := 1.0, 0.0
	call := func(id, agent, model string, prompt, resp []int32) api.ModelCall {
		lp := make([]float32, len(resp))
		return api.ModelCall{CallID: id, API: api.ShapeChatCompletions, Model: model, ModelVersion: 1, Agent: agent,
			PromptIDs: prompt, ResponseIDs: resp, ResponseLogprobs: lp, Continued: len(prompt) > 3}
	}
	// Two turns: the second prompt extends the first prompt and response.
	twoTurns := []api.ModelCall{call("c1", "", "m", []int32{1, 2, 3}, []int32{10, 11}), call("c2", "", "m", []int32{1, 2, 3, 10, 11, 4}, []int32{12})}
	rollouts := []sftRollout{
		{id: "t1", mode: store.ModeTrain, meta: `{"step":1,"seed":5}`, reward: &one, calls: twoTurns},
		{id: "t2", mode: store.ModeTrain, meta: `{"step":1,"seed":6}`, reward: &one, calls: twoTurns},
		{id: "t3", mode: store.ModeTrain, meta: `{"step":2}`, reward: &zero, calls: []api.ModelCall{call("c1", "", "m", []int32{1, 5}, []int32{13})}},
		{id: "t4", mode: store.ModeTrain, meta: `{"step":3}`, reward: &one, calls: []api.ModelCall{
			call("c1", "", "m", []int32{1, 6}, []int32{20}), call("c2", "", "m", []int32{1, 6}, []int32{21}), // a retry
			call("c3", "checker", "frozen", []int32{7, 8}, []int32{30, 31})}},
		{id: "v1", mode: store.ModeVal, meta: `{"step":3}`, reward: &one, calls: []api.ModelCall{call("c1", "", "m", []int32{1, 9}, []int32{14})}},
		{id: "t5", mode: store.ModeTrain, meta: `{"step":2}`, calls: []api.ModelCall{call("c1", "", "m", []int32{1, 15}, []int32{16})}},
		{id: "t6", mode: store.ModeTrain, meta: `{"step":2}`, reward: &one, cancel: true},
		{id: "t7", mode: store.ModeTrain, meta: `{"step":2}`, reward: &one, calls: []api.ModelCall{{CallID: "c1", API: api.ShapeChatCompletions, Model: "m", NoTokenIDs: true}}},
		{id: "x1", mode: store.ModeTrain, meta: `{"other":true}`, reward: &one, calls: []api.ModelCall{call("c1", "", "m", []int32{1, 17}, []int32{18})}},
	}
	for _, r := range rollouts {
		if _, err := st.CreateRollouts(ctx, []store.NewRollout{{ID: r.id, Mode: r.mode, Task: json.RawMessage(`{}`), Metadata: json.RawMessage(r.meta)}}); err != nil {
			t.Fatal(err)
		}
		if r.cancel {
			if _, err := st.CancelRollout(ctx, r.id, "test"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		cl, err := st.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
		if err != nil || cl.Rollout.ID != r.id {
			t.Fatalf("claim %s: got %s, %v", r.id, cl.Rollout.ID, err)
		}
		var ne []store.NewEvent
		for _, c := range r.calls {
			b, _ := json.Marshal(c)
			ne = append(ne, store.NewEvent{Type: store.EventModelRequest, Data: b})
		}
		if r.reward != nil {
			ne = append(ne, store.NewEvent{Type: store.EventReward, Data: json.RawMessage(fmt.Sprint(*r.reward))})
		}
		if _, err := st.AppendEvents(ctx, r.id, cl.Attempt.ID, ne); err != nil {
			t.Fatal(err)
		}
		if _, err := st.CompleteAttempt(ctx, r.id, cl.Attempt.ID, store.AttemptSucceeded, ""); err != nil {
			t.Fatal(err)
		}
	}
	rs, evs, _, err := Load(ctx, st, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	steps := [2]int{1, 3}
	tests := []struct {
		name  string
		f     SFTFilter
		want  []string // rollout:ids:mask of each sample, in order
		stats SFTStats
	}{
		{"everything", SFTFilter{},
			[]string{"t1:[1 2 3 10 11 4 12]:[0 0 0 1 1 0 1]", "t3:[1 5 13]:[0 0 1]", "t4:[1 6 21]:[0 0 1]", "t4:[7 8 30 31]:[0 0 1 1]",
				"v1:[1 9 14]:[0 0 1]", "t5:[1 15 16]:[0 0 1]", "x1:[1 17 18]:[0 0 1]"},
			SFTStats{Rollouts: 9, Skipped: 1, Matched: 8, Calls: 12, RetriedCalls: 1, Excluded: 1, Duplicates: 1, Samples: 7, Tokens: 26, TrainedTokens: 10}},
		{"rejection sampling", SFTFilter{MinReward: &one, Mode: store.ModeTrain, Steps: &steps, Agents: []string{""}},
			[]string{"t1:[1 2 3 10 11 4 12]:[0 0 0 1 1 0 1]", "t4:[1 6 21]:[0 0 1]"},
			SFTStats{Rollouts: 9, Skipped: 1, OffMode: 1, OffSteps: 1, OffReward: 1, NoReward: 1, Matched: 4, Calls: 8, OffAgent: 1, RetriedCalls: 1, Excluded: 1,
				Duplicates: 1, Samples: 2, Tokens: 10, TrainedTokens: 4}},
		{"a policy", SFTFilter{MinReward: &one, Policy: "frozen"},
			[]string{"t4:[7 8 30 31]:[0 0 1 1]"},
			SFTStats{Rollouts: 9, Skipped: 1, OffReward: 1, NoReward: 1, Matched: 6, Calls: 10, OffPolicy: 9, Samples: 1, Tokens: 4, TrainedTokens: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ss, stats := SFTSamples(rs, evs, tc.f, BuildConfig{})
			var got []string
			for _, s := range ss {
				got = append(got, fmt.Sprintf("%s:%v:%v", s.RolloutID, s.IDs, s.LossMask))
				if s.Reward != 1 && s.RolloutID != "t3" && s.RolloutID != "t5" {
					t.Errorf("%s: reward %v, want its rollout's 1", s.RolloutID, s.Reward)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("samples\n got %q\nwant %q", got, tc.want)
			}
			if stats != tc.stats {
				t.Errorf("stats\n got %+v\nwant %+v", stats, tc.stats)
			}
		})
	}
	// Nothing left: the explanation names what left the rollouts out.
	late := [2]int{5, 9}
	ss, stats := SFTSamples(rs, evs, SFTFilter{Steps: &late, MinReward: &one}, BuildConfig{})
	if f := (SFTFilter{Steps: &late, MinReward: &one}).String(); len(ss) != 0 || f != "reward ≥ 1, steps 5..9" ||
		stats.Why() != "9 rollouts read, 0 matched (left out: 1 cancelled, 8 of other steps)" {
		t.Errorf("steps 5..9: %d samples; filter %q; why %q", len(ss), f, stats.Why())
	}
	for _, tc := range []struct {
		in   string
		want [2]int
		err  string
	}{{"2..5", [2]int{2, 5}, ""}, {"4", [2]int{4, 4}, ""}, {"5..2", [2]int{}, "want A..B"}, {"a..b", [2]int{}, "want A..B"}, {"-1..2", [2]int{}, "want A..B"}} {
		got, err := ParseStepRange(tc.in)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseStepRange(%q) = %v, %v", tc.in, got, err)
		}
	}
}
