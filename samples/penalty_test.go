package samples

import (
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

func TestLengthPenalty(t *testing.T) {
	for _, tc := range []struct {
		lambda        float64
		tokens, limit int
		want          float64
	}{
		{0, 100, 10, 0},      // off
		{0.5, 100, 0, 0},     // no L: off
		{0.5, 0, 10, 0},      // nothing generated
		{0.5, 5, 10, 0.25},   // half the budget
		{0.5, 10, 10, 0.5},   // the whole budget
		{0.5, 1000, 10, 0.5}, // capped at λ
	} {
		if got := LengthPenalty(tc.lambda, tc.tokens, tc.limit); !near(got, tc.want, 1e-12) {
			t.Errorf("LengthPenalty(%v, %d, %d) = %v, want %v", tc.lambda, tc.tokens, tc.limit, got, tc.want)
		}
	}
}

// TestFromRolloutsLengthPenalty: two rollouts that both solved the task
// (a zero-variance group without the penalty, dropped) differ by their
// response length once the penalty is on: the shorter one gets the
// positive advantage. The penalty counts every call's response tokens;
// a failed rollout (reward ≤ 0) is not penalized.
func TestFromRolloutsLengthPenalty(t *testing.T) {
	var seq int64
	f := func(x float64) *float64 { return &x }
	rs := []store.Rollout{
		{ID: "short", GroupID: "g", Status: store.RolloutSucceeded, Mode: store.ModeTrain},
		{ID: "long", GroupID: "g", Status: store.RolloutSucceeded, Mode: store.ModeTrain},
	}
	evs := map[string][]store.Event{
		"short": toEvents(t, &seq, "short", "short-a1", []api.ModelCall{call("s0", 1, []int32{1, 2}, []int32{3, 4})}, f(1)),
		"long": toEvents(t, &seq, "long", "long-a1", []api.ModelCall{
			call("l0", 1, []int32{1, 2}, []int32{3, 4, 5, 6}),
			call("l1", 1, []int32{1, 2, 3, 4, 5, 6, 7}, []int32{8, 9, 10, 11})}, f(1)),
	}
	failed := map[string][]store.Event{
		"short": toEvents(t, &seq, "short", "short-a1", []api.ModelCall{call("s0", 1, []int32{1, 2}, []int32{3, 4})}, f(0)),
		"long":  toEvents(t, &seq, "long", "long-a1", []api.ModelCall{call("l0", 1, []int32{1, 2}, []int32{3, 4, 5, 6})}, f(0)),
	}
	for _, tc := range []struct {
		name     string
		reward   RewardConfig
		samples  int
		dropped  int
		penalty  float64
		positive string
	}{
		{"off: uniform group dropped", RewardConfig{}, 0, 1, 0, ""},
		// short: 2 tokens of 8 → 0.1·0.25; long: 8 of 8 → 0.1
		{"on: shorter wins", RewardConfig{LengthPenalty: 0.1, LengthPenaltyTokens: 8}, 2, 0, 0.125, "short"},
		// failures are not penalized: the group stays uniform and is dropped
		{"on, both failed", RewardConfig{LengthPenalty: 0.1, LengthPenaltyTokens: 8}, 0, 1, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := evs
			if tc.name == "on, both failed" {
				evs = failed
			}
			res, err := FromRollouts(rs, evs, Config{Reward: tc.reward, Advantage: AdvantageConfig{Estimator: DrGRPO, DropZeroVariance: true}})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Samples) != tc.samples || res.Stats.Groups.Dropped != tc.dropped || !near(res.Stats.LengthPenalty, tc.penalty, 1e-12) {
				t.Fatalf("samples %d dropped %d penalty %v: %+v", len(res.Samples), res.Stats.Groups.Dropped, res.Stats.LengthPenalty, res.Stats)
			}
			for _, s := range res.Samples {
				if (s.RolloutID == tc.positive) != (s.Advantage > 0) {
					t.Errorf("%s: advantage %v", s.RolloutID, s.Advantage)
				}
			}
		})
	}
}
